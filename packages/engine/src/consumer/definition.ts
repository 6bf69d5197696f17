import { isAbsolute } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ConfigError } from '../errors.ts';
import { defaultRetryBudget, type RetryBudget } from '../retry/budget.ts';
import type { FirstVersionPolicy } from './version-gate.ts';

/** Bounds of one consumer. Every field is optional in `defineConsumer`; defaults below. */
export interface ConsumerLimits {
  /**
   * Events received and not yet settled (buffered + in flight + retrying); over it, partitions pause. Room for the
   * tasks in flight (2 per thread × maxBatchEvents) and as much again ready behind them: a smaller cap leaves
   * threads waiting for a full batch (the consumer bench: 2.3× from 1000 to 8000). Memory is bounded by
   * maxInFlightBytes. @defaultValue 4000
   */
  maxInFlightEvents: number;
  /** Bytes of those events (values); over it, partitions pause. @defaultValue 16 MiB */
  maxInFlightBytes: number;
  /** Events per worker task, i.e. per batch transaction. @defaultValue 500 */
  maxBatchEvents: number;
  /** Worker threads (each loads the handler module once and owns a PostgreSQL pool). @defaultValue 2 */
  threads: number;
  /** PostgreSQL connections per thread. @defaultValue 2 */
  databasePoolSize: number;
  /**
   * Old-generation heap of each worker thread, MiB (its young generation is 8 MiB). V8 sizes heaps from the
   * machine's memory and collects lazily up to there, so unbounded threads hold ≈ 700 MiB of garbage while
   * draining a backlog (the backlog bench); a thread over the bound is ended and replaced, and its task retried.
   * Raise it for handlers that hold large data. @defaultValue 256
   */
  workerHeapMb: number;
  /** Largest record value accepted; larger is a permanent failure. @defaultValue 1 MiB + 64 KiB */
  maxEventBytes: number;
  /**
   * Handlers of one batch (distinct aggregates) started together in its transaction, so postgres.js pipelines
   * their statements on the connection. 1 = one after the other. Raise it only for handlers that do not read
   * and then write rows shared across aggregates (their statements would interleave inside one transaction), and
   * open no savepoints (nested transactions of TypeORM, PrismaBinding.run: they would interleave too).
   * @defaultValue 1
   */
  handlerConcurrency: number;
  /**
   * How long one handler call may take; past it the call is abandoned, its transaction rolled back, and the
   * event retried as a transient failure (handler_timeout). Also the statement_timeout of the consumer's
   * connections. @defaultValue 30000
   */
  handlerTimeoutMs: number;
}

/** The clients a handler may write with (see ConsumerInput.db). */
export const HANDLER_CLIENTS = ['postgres.js', 'pg', 'drizzle', 'kysely', 'prisma', 'typeorm'] as const;
export type HandlerClient = (typeof HANDLER_CLIENTS)[number];

export interface ConsumerInput {
  /** Unique per consumer; keys the inbox, the version gate and the failure store. */
  name: string;
  topics: string[];
  /** Absolute path or file URL of the handler module (default export: the handler). */
  handler: string | URL;
  /**
   * The client the handler writes with: its second argument is then that client's handle bound to Postbox's
   * transaction instead of postgres.js's `tx` (pg: a pg-shaped client; drizzle: a node-postgres Drizzle database;
   * kysely: a Kysely instance; prisma: a Prisma transaction client, the module exporting its `prisma` binding;
   * typeorm: an EntityManager, the module exporting its `dataSource`). @defaultValue 'postgres.js'
   */
  db?: HandlerClient;
  /** @defaultValue `postbox.<name>` */
  groupId?: string;
  /** @defaultValue 'strict' */
  firstVersion?: FirstVersionPolicy;
  /** Accepted schema versions per event type; a type not listed accepts only 1. @defaultValue {} */
  schemaVersions?: Record<string, number[]>;
  /**
   * The tenants whose events this consumer applies (the event's `tenant` extension attribute). Any other tenant's
   * event, or one naming none, is a permanent failure `tenant_refused`: stored, never applied. @defaultValue every
   * event, whatever its tenant
   */
  tenants?: string[];
  /** Where a new consumer group starts. @defaultValue true (the beginning: nothing is skipped) */
  fromBeginning?: boolean;
  limits?: Partial<ConsumerLimits>;
  /** The durable retry policy of transient failures (README, Retries). Defaults: defaultRetryBudget. */
  retry?: RetryInput;
}

/** Flat, so it reads well in a definition; every field optional. */
export interface RetryInput {
  /** Attempts in all, the first delivery included. @defaultValue 10 */
  maxAttempts?: number;
  /** From the first failure to the last retry. @defaultValue 3_600_000 (1 h) */
  maxTotalMs?: number;
  /** Full-jitter base. @defaultValue 500 */
  baseMs?: number;
  /** @defaultValue 120_000 */
  capMs?: number;
  /** @defaultValue 8 */
  maxExponent?: number;
  /** The shortest delay between attempts. @defaultValue 0 */
  minDelayMs?: number;
}

/** A validated consumer, defaults resolved. Plain data: it crosses into worker threads. */
export interface ConsumerDefinition {
  name: string;
  topics: string[];
  /** file: URL */
  handler: string;
  db: HandlerClient;
  groupId: string;
  firstVersion: FirstVersionPolicy;
  schemaVersions: Record<string, number[]>;
  /** null: every tenant. */
  tenants: string[] | null;
  fromBeginning: boolean;
  limits: ConsumerLimits;
  retry: RetryBudget;
}

export const defaultConsumerLimits: ConsumerLimits = {
  maxInFlightEvents: 4000,
  maxInFlightBytes: 16 * 1024 * 1024,
  maxBatchEvents: 500,
  threads: 2,
  databasePoolSize: 2,
  workerHeapMb: 256,
  maxEventBytes: 1024 * 1024 + 64 * 1024,
  handlerConcurrency: 1,
  handlerTimeoutMs: 30_000,
};

const NAME = /^[A-Za-z][A-Za-z0-9._-]{0,99}$/;
const TOPIC = /^[A-Za-z0-9._-]{1,249}$/;

/** Validates a consumer loudly: every ConfigError says which field and how to fix it. */
export function defineConsumer(input: ConsumerInput): ConsumerDefinition {
  const where = `consumer "${String(input?.name)}"`;
  if (typeof input?.name !== 'string' || !NAME.test(input.name)) {
    throw new ConfigError(
      `consumer name must start with a letter and use only letters, digits and . _ - (at most 100), got ${JSON.stringify(input?.name)}`,
    );
  }
  if (
    !Array.isArray(input.topics) ||
    input.topics.length === 0 ||
    !input.topics.every((t) => typeof t === 'string' && TOPIC.test(t))
  ) {
    throw new ConfigError(
      `${where}: topics must be a non-empty list of Kafka topic names, got ${JSON.stringify(input.topics)}`,
    );
  }
  const handler = handlerUrl(input.handler, where);
  const firstVersion = input.firstVersion ?? 'strict';
  if (firstVersion !== 'strict' && firstVersion !== 'adopt') {
    throw new ConfigError(
      `${where}: firstVersion must be 'strict' (aggregates start at version 1) or 'adopt' (the first version seen is the baseline), got ${JSON.stringify(firstVersion)}`,
    );
  }
  const schemaVersions = input.schemaVersions ?? {};
  for (const [type, versions] of Object.entries(schemaVersions)) {
    if (!Array.isArray(versions) || versions.length === 0 || !versions.every((v) => Number.isInteger(v) && v >= 1)) {
      throw new ConfigError(
        `${where}: schemaVersions.${type} must be a non-empty list of integers ≥ 1, got ${JSON.stringify(versions)}`,
      );
    }
  }
  const tenants = input.tenants ?? null;
  if (
    tenants !== null &&
    (!Array.isArray(tenants) ||
      tenants.length === 0 ||
      !tenants.every((t) => typeof t === 'string' && t.length > 0 && t.length <= 256))
  ) {
    throw new ConfigError(
      `${where}: tenants must be a non-empty list of tenant names (1–256 characters), got ${JSON.stringify(tenants)}; leave it out to accept every tenant`,
    );
  }
  const limits = { ...defaultConsumerLimits, ...(input.limits ?? {}) };
  for (const [key, value] of Object.entries(limits)) {
    if (!Number.isInteger(value) || value < 1)
      throw new ConfigError(`${where}: limits.${key} must be an integer ≥ 1, got ${JSON.stringify(value)}`);
  }
  if (limits.workerHeapMb < 64) {
    throw new ConfigError(
      `${where}: limits.workerHeapMb must be at least 64 (MiB of old-generation heap per worker thread), got ${limits.workerHeapMb}`,
    );
  }
  if (limits.maxBatchEvents > limits.maxInFlightEvents) {
    throw new ConfigError(
      `${where}: limits.maxBatchEvents (${limits.maxBatchEvents}) must not exceed limits.maxInFlightEvents (${limits.maxInFlightEvents})`,
    );
  }
  if (limits.maxInFlightBytes < limits.maxEventBytes) {
    throw new ConfigError(
      `${where}: limits.maxInFlightBytes (${limits.maxInFlightBytes}) must be at least limits.maxEventBytes (${limits.maxEventBytes}), or one large event could never fit`,
    );
  }
  const retry = retryBudget(input.retry ?? {}, where);
  const db = input.db ?? 'postgres.js';
  if (!(HANDLER_CLIENTS as readonly string[]).includes(db))
    throw new ConfigError(`${where}: db must be one of ${HANDLER_CLIENTS.join(', ')}, got ${JSON.stringify(input.db)}`);
  const groupId = input.groupId ?? `postbox.${input.name}`;
  if (typeof groupId !== 'string' || groupId.length === 0)
    throw new ConfigError(`${where}: groupId must be a non-empty string`);
  return {
    name: input.name,
    topics: [...input.topics],
    handler,
    db,
    groupId,
    firstVersion,
    schemaVersions: structuredClone(schemaVersions),
    tenants: tenants === null ? null : [...tenants],
    fromBeginning: input.fromBeginning ?? true,
    limits,
    retry,
  };
}

function retryBudget(input: RetryInput, where: string): RetryBudget {
  const d = defaultRetryBudget;
  const budget: RetryBudget = {
    maxAttempts: input.maxAttempts ?? d.maxAttempts,
    maxTotalMs: input.maxTotalMs ?? d.maxTotalMs,
    minDelayMs: input.minDelayMs ?? d.minDelayMs,
    backoff: {
      baseMs: input.baseMs ?? d.backoff.baseMs,
      capMs: input.capMs ?? d.backoff.capMs,
      maxExponent: input.maxExponent ?? d.backoff.maxExponent,
    },
  };
  const fields: Array<[string, number, number]> = [
    ['maxAttempts', budget.maxAttempts, 1],
    ['maxTotalMs', budget.maxTotalMs, 0],
    ['minDelayMs', budget.minDelayMs, 0],
    ['baseMs', budget.backoff.baseMs, 1],
    ['capMs', budget.backoff.capMs, 1],
    ['maxExponent', budget.backoff.maxExponent, 0],
  ];
  for (const [key, value, min] of fields) {
    if (!Number.isInteger(value) || value < min)
      throw new ConfigError(`${where}: retry.${key} must be an integer ≥ ${min}, got ${JSON.stringify(value)}`);
  }
  if (budget.backoff.capMs < budget.backoff.baseMs)
    throw new ConfigError(
      `${where}: retry.capMs (${budget.backoff.capMs}) must be at least retry.baseMs (${budget.backoff.baseMs})`,
    );
  return budget;
}

function handlerUrl(handler: string | URL, where: string): string {
  if (handler instanceof URL) {
    if (handler.protocol !== 'file:')
      throw new ConfigError(`${where}: handler must be a file: URL or an absolute path, got ${handler.href}`);
    return handler.href;
  }
  if (typeof handler === 'string' && handler.startsWith('file:')) return handler;
  if (typeof handler === 'string' && isAbsolute(handler)) return pathToFileURL(handler).href;
  throw new ConfigError(
    `${where}: handler must be an absolute path or a file: URL of a module whose default export is the handler (e.g. new URL('./handler.ts', import.meta.url)), got ${JSON.stringify(handler)}`,
  );
}

/** The accepted schema versions of an event type (1 when the type is not listed). */
export function acceptsSchema(
  definition: Pick<ConsumerDefinition, 'schemaVersions'>,
  eventType: string,
  version: number,
): boolean {
  return (definition.schemaVersions[eventType] ?? [1]).includes(version);
}

/**
 * Why the consumer refuses an event's tenant (`extensions.tenant`), or null when it takes it: a consumer that
 * names its tenants takes only theirs, and no event without one.
 */
export function tenantRefusal(
  definition: Pick<ConsumerDefinition, 'tenants'>,
  tenant: string | undefined,
): string | null {
  const accepted = definition.tenants;
  if (accepted === null || (tenant !== undefined && accepted.includes(tenant))) return null;
  const list = accepted.map((t) => JSON.stringify(t)).join(', ');
  return tenant === undefined
    ? `the event names no tenant; this consumer takes only tenant ${list}`
    : `tenant ${JSON.stringify(tenant)} is not one this consumer takes (${list})`;
}
