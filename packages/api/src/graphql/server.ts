import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EnvelopArmorPlugin } from '@escape.tech/graphql-armor';
import { NoSchemaIntrospectionCustomRule } from 'graphql';
import { insertAudit } from '@postbox/engine/control';
import { observeReconcileFindings } from '@postbox/engine/reconcile';
import { createYoga, type Plugin } from 'graphql-yoga';
import type { ApiConfig } from '../config/api.ts';
import { callerOf } from './auth.ts';
import { graphiqlAssets, renderGraphiQL } from './graphiql.ts';
import { bodyLimit, mutationRateLimit, securityHeaders } from './hardening.ts';
import type { ApiContext, ApiDeps } from './context.ts';
import { SubscriptionSlots, subscriptionLimit } from './subscription-slots.ts';
import { schema } from './schema/index.ts';

export interface ControlPlane {
  /** http://host:port/graphql */
  url: string;
  server: Server;
  close(): Promise<void>;
}

/**
 * The GraphQL control plane over HTTP (graphql-yoga): bearer-token callers, graphql-armor limits checked
 * before execution, introspection only outside production or for admin, errors masked (a GraphQLError a
 * resolver meant to show passes; anything else becomes "Unexpected error."), single requests only. GraphiQL
 * (development only) comes from this server, never a CDN, under a strict content security policy. CORS is off unless
 * origins are named; every answer carries security headers; mutation fields are rate-limited per token and bodies
 * bounded however they are framed (hardening.ts); subscriptions are authorized when made and capped per token and
 * in all (subscription-slots.ts).
 */
export function createControlPlaneHandler(config: ApiConfig, deps: ApiDeps) {
  const slots = new SubscriptionSlots(config.subscriptionsPerToken ?? 4, config.subscriptionsTotal ?? 32);
  return createYoga<{}, ApiContext>({
    schema,
    graphqlEndpoint: '/graphql',
    maskedErrors: true,
    batching: false,
    landingPage: false,
    // Off unless origins are named: yoga's default answers any origin.
    cors:
      (config.corsOrigins ?? []).length > 0
        ? { origin: config.corsOrigins!, methods: ['GET', 'POST'], allowedHeaders: ['authorization', 'content-type'] }
        : false,
    graphiql: config.production
      ? false
      : { title: 'Postbox control plane', headers: JSON.stringify({ Authorization: 'Bearer <token>' }) },
    renderGraphiQL,
    context: ({ request }): ApiContext => ({
      caller: callerOf(request.headers.get('authorization'), config.tokens),
      deps,
      production: config.production,
      audits: [],
      deniedReads: new Map(),
    }),
    plugins: [
      ...(config.production ? [] : [graphiqlAssets()]),
      bodyLimit(config.maxBodyBytes),
      EnvelopArmorPlugin({
        // The schema has no cycles; only introspection nests deep (GraphiQL’s own query is 21 levels deep).
        maxDepth: { n: 25, ignoreIntrospection: false },
        maxAliases: { n: 15 },
        maxTokens: { n: 2000 },
        maxDirectives: { n: 10 },
        costLimit: { maxCost: 5000 },
        blockFieldSuggestion: { enabled: true },
      }),
      introspectionGate(config),
      securityHeaders(),
      mutationRateLimit(config.mutationsPerMinute ?? 60),
      subscriptionLimit(slots),
      flushAudits(),
    ],
  });
}

export async function startControlPlane(config: ApiConfig, deps: ApiDeps): Promise<ControlPlane> {
  const yoga = createControlPlaneHandler(config, deps);
  const server = createServer(yoga);
  // Bounded: a slow client cannot hold a socket forever.
  server.requestTimeout = 30_000;
  server.headersTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.port, config.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  deps.backlog.start();
  // The control plane holds the broker admin: it samples the replica health and exports its gauges.
  deps.brokerHealth.start();
  // The control plane runs reconciliation, so it reports the findings gauge (read from the rows at a scrape).
  const unobserve = observeReconcileFindings(server, deps.sql);
  return {
    url: `http://${config.host}:${address.port}/graphql`,
    server,
    async close() {
      unobserve();
      await deps.backlog.stop();
      await deps.brokerHealth.stop();
      server.closeIdleConnections();
      // Subscriptions (SSE) are long requests: end them rather than wait.
      const forced = setTimeout(() => server.closeAllConnections(), 2000);
      await new Promise<void>((resolve) => server.close(() => resolve()));
      clearTimeout(forced);
    },
  };
}

/**
 * Production hides the schema from everyone but admin (field suggestions are off everywhere). Validation runs
 * before the request's context is built, so the caller is read from the request here.
 */
function introspectionGate(config: ApiConfig): Plugin<{ request: Request }> {
  return {
    onValidate({ context, addValidationRule }) {
      if (!config.production) return;
      if (!callerOf(context.request.headers.get('authorization'), config.tokens).scopes.has('admin'))
        addValidationRule(NoSchemaIntrospectionCustomRule);
    },
  };
}

/**
 * Denied mutations and refused payload reads are audited before the response goes out, so a client that saw
 * FORBIDDEN finds the row. A refused read is one row per field and request, naming the rows it was asked of (at
 * most a page of them), so a long list costs one insert, not one per row.
 */
function flushAudits(): Plugin<ApiContext> {
  return {
    onExecute() {
      return {
        async onExecuteDone({ args }) {
          const ctx = args.contextValue;
          for (const [field, targets] of ctx.deniedReads)
            ctx.audits.push(
              insertAudit(ctx.deps.sql, {
                actor: ctx.caller.actor,
                action: `read:${field}`,
                reason: null,
                target: targets.length === 1 ? targets[0]! : null,
                before: null,
                after: { targets: targets.slice(0, 100) },
                outcome: 'denied',
              }).catch(() => {}),
            );
          ctx.deniedReads.clear();
          await Promise.all(ctx.audits);
        },
      };
    },
  };
}
