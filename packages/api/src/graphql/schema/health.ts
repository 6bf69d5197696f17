import { checkHealth, type HealthCheck } from '@postbox/engine/control';
import { builder } from '../builder.ts';

const HealthCheckRef = builder.objectRef<HealthCheck>('HealthCheck').implement({
  fields: (t) => ({
    name: t.exposeString('name'),
    ok: t.exposeBoolean('ok'),
    latencyMs: t.exposeInt('latencyMs'),
    error: t.exposeString('error', { nullable: true }),
  }),
});

const HealthRef = builder.objectRef<{ ready: boolean; checks: HealthCheck[] }>('Health').implement({
  fields: (t) => ({
    ready: t.exposeBoolean('ready', { description: 'Every dependency answered (PostgreSQL, Kafka, Redis)' }),
    checks: t.field({
      type: [HealthCheckRef],
      description: 'Needs the viewer scope',
      authScopes: { viewer: true },
      resolve: (h) => h.checks,
    }),
  }),
});

builder.queryField('health', (t) =>
  t.field({
    type: HealthRef,
    description: 'Readiness, open to every caller (the details need the viewer scope)',
    resolve: (_root, _args, ctx) => checkHealth(ctx.deps.probes),
  }),
);
