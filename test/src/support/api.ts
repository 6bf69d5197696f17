import { randomBytes } from 'node:crypto';
import {
  apiToken,
  createApiResources,
  readConfig,
  startControlPlane,
  type ApiConfig,
  type ApiResources,
  type ControlPlane,
  type Scope,
} from '@postbox/api';
import type { CheckName, ParticipantRecords, ReconcileSource } from '@postbox/engine/reconcile';
import type { SagaOrchestrator } from '@postbox/engine/saga';
import { stack } from './stack.ts';

export type Role = 'viewer' | 'operator' | 'admin' | 'payload';

export interface TestApi {
  url: string;
  /** A bearer token per role (payload = viewer + payload). */
  tokens: Record<Role, string>;
  resources: ApiResources;
  gql<T = any>(query: string, variables?: Record<string, unknown>, token?: string | null): Promise<GqlResponse<T>>;
  post(body: string, token?: string | null, headers?: Record<string, string>): Promise<{ status: number; json: any }>;
  close(): Promise<void>;
}

export interface GqlResponse<T> {
  status: number;
  data: T | null;
  errors?: Array<{ message: string; extensions?: { code?: string; [k: string]: unknown } }>;
}

const ROLE_SCOPES: Record<Role, Scope[]> = {
  viewer: ['viewer'],
  operator: ['operator'],
  admin: ['admin'],
  payload: ['viewer', 'payload'],
};

/** The control plane on a random port over a test's database, with one token per role; a real HTTP client. */
export async function startTestApi(
  databaseUrl: string,
  options: {
    production?: boolean;
    /** Settings of the control plane over the test's defaults (CORS origins, mutation rate). */
    config?: Partial<ApiConfig>;
    topics?: string;
    redisUrl?: string;
    kafkaBrokers?: string;
    /** The saga definitions operator actions are built from (none: sagas are read, not acted on). */
    sagas?: SagaOrchestrator;
    /** The reconciliation sources and participant records (none: the outbox and consumer checks skip). */
    reconcile?: { sources: ReconcileSource[]; participants?: ParticipantRecords[] };
    reconcileGraceMs?: Partial<Record<CheckName, number>>;
    /** Further environment the configuration is read from (POSTBOX_PAYLOAD_KEYS, …). */
    env?: Record<string, string>;
  } = {},
): Promise<TestApi> {
  const tokens = Object.fromEntries(
    (Object.keys(ROLE_SCOPES) as Role[]).map((r) => [r, `${r}-${randomBytes(16).toString('hex')}`]),
  ) as Record<Role, string>;
  const config: ApiConfig = {
    host: '127.0.0.1',
    port: 0,
    production: options.production ?? false,
    tokens: (Object.keys(ROLE_SCOPES) as Role[]).map((r) => apiToken(`test-${r}`, ROLE_SCOPES[r], tokens[r])),
    devToken: null,
    maxBodyBytes: 65_536,
    // Tests run many mutations a second with one token; the limit itself has a test of its own.
    mutationsPerMinute: 1_000_000,
    ...options.config,
  };
  const resources = createApiResources(
    readConfig(
      {
        ...stack,
        DATABASE_URL: databaseUrl,
        REDIS_URL: options.redisUrl ?? stack.REDIS_URL,
        KAFKA_BROKERS: options.kafkaBrokers ?? stack.KAFKA_BROKERS,
      },
      { POSTBOX_TOPICS: options.topics ?? 'api.unused:1', ...options.env },
    ),
    {
      ...(options.sagas ? { sagas: options.sagas } : {}),
      ...(options.reconcile
        ? { reconcile: { sources: options.reconcile.sources, participants: options.reconcile.participants ?? [] } }
        : {}),
      ...(options.reconcileGraceMs ? { reconcileGraceMs: options.reconcileGraceMs } : {}),
    },
  );
  let plane: ControlPlane;
  try {
    plane = await startControlPlane(config, resources.deps);
  } catch (cause) {
    await resources.close();
    throw cause;
  }
  const post = async (body: string, token?: string | null, headers: Record<string, string> = {}) => {
    const res = await fetch(plane.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/graphql-response+json, application/json',
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...headers,
      },
      body,
    });
    const text = await res.text();
    let json: any;
    try {
      json = JSON.parse(text);
    } catch {
      json = { raw: text };
    }
    return { status: res.status, json };
  };
  return {
    url: plane.url,
    tokens,
    resources,
    post,
    async gql(query, variables = {}, token = tokens.admin) {
      const { status, json } = await post(JSON.stringify({ query, variables }), token);
      return { status, data: json.data ?? null, ...(json.errors ? { errors: json.errors } : {}) };
    },
    async close() {
      await plane.close();
      await resources.close();
    },
  };
}
