import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigError, parsePayloadKeys, type PayloadKeyRing } from '@postbox/engine';
import { parseBrokers, type KafkaConnection, type TopicSpec } from '@postbox/engine/kafka';
import { resolveRelayOptions, type RelayOptions } from '@postbox/engine/runtime';
import { parseNatsServers } from '@postbox/engine/nats';
import {
  resolvePartitionOptions,
  resolveRetentionPolicy,
  type PartitionOptions,
  type RetentionPolicy,
} from '@postbox/engine/retention';
import { brokerKind, requireLink, type BrokerKind, type LinkEnv } from './links.ts';
import { kafkaSsl } from './link-security.ts';
import { DEFAULT_RELAY_THREADS, type BrokerConnection } from '@postbox/workers';

/**
 * Every setting Postbox reads from the environment, resolved once and validated with messages that say how to
 * fix them. Only entry files call this; components take the resolved object.
 */
export interface PostboxConfig {
  /** The URL of the command's role (DATABASE_URL_RELAY, …), else DATABASE_URL. */
  databaseUrl: string;
  /**
   * DATABASE_URL: the tables' owner, for what needs ownership (the demo's migrations). Empty when unset: a command
   * run with its role's URL only (DATABASE_URL_RELAY, …) does not need it.
   */
  ownerDatabaseUrl: string;
  redisUrl: string;
  /** POSTBOX_BROKER: where the relay publishes (Kafka, or NATS JetStream at NATS_URL). */
  broker: BrokerConnection;
  topics: TopicSpec[];
  relay: RelayOptions;
  relayThreads: number;
  /** The outbox's and inbox's time partitions: POSTBOX_PARTITION_PERIOD_S, POSTBOX_PARTITION_AHEAD. */
  partitions: PartitionOptions;
  /** How long rows are kept and where archives go (POSTBOX_*_RETENTION_DAYS, POSTBOX_ARCHIVE_DIR). */
  retention: RetentionPolicy;
  /**
   * Whether long-running processes run retention once a day (POSTBOX_RETENTION_SCHEDULE: on | off; default on
   * when POSTBOX_ARCHIVE_DIR is set).
   */
  retentionSchedule: boolean;
  logLevel: string;
  demoRate: number;
  /** Order-fulfilment sagas a second the demo starts among its placed orders (0 = none). */
  demoSagaRate: number;
  /** The demo saga's topic prefix and its simulated troubles (demo/saga/settings.ts). */
  demoSaga: { prefix: string; refusedPayments: number; lostReplies: number };
  /** How often each consumer checks its retry ledger against the scheduler's jobs. */
  retryReconcileMs: number;
  /**
   * Consumer group session: a member silent this long is dropped and its partitions move (a crashed process
   * holds them until then). Within the broker's group.min/max.session.timeout.ms.
   */
  kafkaSessionTimeoutMs: number | undefined;
  kafkaHeartbeatMs: number | undefined;
  /** NATS consumers: a member silent this long loses its partition leases to the others. */
  partitionLeaseMs: number | undefined;
  /**
   * POSTBOX_PAYLOAD_KEYS (`id:base64key,…`): seals what the failure store and the retry ledger keep of an event;
   * null keeps them in clear.
   */
  payloadKeys: PayloadKeyRing | null;
}

/** Settings given as command-line flags: they win over the environment, and never rewrite it. */
export interface ConfigOverrides {
  relayThreads?: number;
  logLevel?: string;
  /** The command's database role: its URL variable wins over DATABASE_URL (databaseUrlFor). */
  role?: CommandRole;
}

/** The commands' database roles (`postbox migrate --roles`), each with its URL variable. */
export type CommandRole = 'relay' | 'consumer' | 'api' | 'operator';

const ROLE_URL: Record<CommandRole, string> = {
  relay: 'DATABASE_URL_RELAY',
  consumer: 'DATABASE_URL_CONSUMER',
  api: 'DATABASE_URL_API',
  operator: 'DATABASE_URL_OPERATOR',
};

/**
 * The URL a command connects with: its role's variable (DATABASE_URL_RELAY, DATABASE_URL_CONSUMER,
 * DATABASE_URL_API, DATABASE_URL_OPERATOR), else DATABASE_URL (in the repository, else the local stack's PostgreSQL).
 */
export function databaseUrlFor(
  role: CommandRole | undefined,
  links: Pick<LinkEnv, 'DATABASE_URL'>,
  env: NodeJS.ProcessEnv = process.env,
): string {
  return (role && env[ROLE_URL[role]]) || requireLink(links, 'DATABASE_URL', 'the URL of your PostgreSQL');
}

/**
 * Reads every variable once. Defaults live where the options are resolved (resolveRelayOptions for the relay,
 * the consumer runtime for Kafka's session): a variable that is not set is passed on as not set.
 */
export function readConfig(
  links: LinkEnv,
  env: NodeJS.ProcessEnv = process.env,
  overrides: ConfigOverrides = {},
): PostboxConfig {
  const relay = {
    batchSize: optionalInt(env, 'POSTBOX_RELAY_BATCH_SIZE'),
    maxBatchBytes: optionalInt(env, 'POSTBOX_RELAY_BATCH_BYTES'),
    leaseMs: optionalInt(env, 'POSTBOX_RELAY_LEASE_MS'),
    laneLeaseMs: optionalInt(env, 'POSTBOX_RELAY_LANE_LEASE_MS'),
    pollMs: optionalInt(env, 'POSTBOX_RELAY_POLL_MS'),
    maxInFlight: optionalInt(env, 'POSTBOX_RELAY_IN_FLIGHT'),
    maxAttempts: optionalInt(env, 'POSTBOX_RELAY_MAX_ATTEMPTS'),
  };
  const backoff = {
    baseMs: optionalInt(env, 'POSTBOX_RELAY_BACKOFF_BASE_MS'),
    capMs: optionalInt(env, 'POSTBOX_RELAY_BACKOFF_CAP_MS'),
  };
  return {
    databaseUrl: databaseUrlFor(overrides.role, links, env),
    ownerDatabaseUrl: links.DATABASE_URL,
    redisUrl: links.REDIS_URL,
    broker: brokerConnection(brokerKind(env), links, env),
    topics: parseTopics(env.POSTBOX_TOPICS ?? 'orders.events:12'),
    relay: resolveRelayOptions({ ...definedOnly(relay), backoff: definedOnly(backoff) }),
    relayThreads: overrides.relayThreads ?? optionalInt(env, 'POSTBOX_RELAY_THREADS', 0) ?? DEFAULT_RELAY_THREADS,
    partitions: resolvePartitionOptions(
      definedOnly({
        periodSeconds: optionalInt(env, 'POSTBOX_PARTITION_PERIOD_S', 1),
        ahead: optionalInt(env, 'POSTBOX_PARTITION_AHEAD', 1),
      }),
    ),
    retention: readRetentionPolicy(env),
    // On by default once archives have a home of the operator's choosing: not a process's working directory.
    retentionSchedule: onOff(env, 'POSTBOX_RETENTION_SCHEDULE', Boolean(env.POSTBOX_ARCHIVE_DIR)),
    logLevel: overrides.logLevel ?? env.LOG_LEVEL ?? 'info',
    demoRate: optionalInt(env, 'POSTBOX_DEMO_RATE', 0) ?? 50,
    demoSagaRate: optionalRate(env, 'POSTBOX_DEMO_SAGA_RATE') ?? 2,
    demoSaga: {
      prefix: optionalPrefix(env, 'POSTBOX_DEMO_SAGA_PREFIX') ?? 'demo',
      refusedPayments: optionalShare(env, 'POSTBOX_DEMO_REFUSED_PAYMENTS') ?? 0.1,
      lostReplies: optionalShare(env, 'POSTBOX_DEMO_LOST_REPLIES') ?? 0.05,
    },
    retryReconcileMs: optionalInt(env, 'POSTBOX_RETRY_RECONCILE_MS', 1000) ?? 60_000,
    kafkaSessionTimeoutMs: optionalInt(env, 'POSTBOX_KAFKA_SESSION_TIMEOUT_MS', 1000),
    kafkaHeartbeatMs: optionalInt(env, 'POSTBOX_KAFKA_HEARTBEAT_MS', 100),
    partitionLeaseMs: optionalInt(env, 'POSTBOX_PARTITION_LEASE_MS', 1000),
    payloadKeys: parsePayloadKeys(env.POSTBOX_PAYLOAD_KEYS),
  };
}

/** The retention policy from the environment (the retention command reads only this). */
export function readRetentionPolicy(env: NodeJS.ProcessEnv = process.env): RetentionPolicy {
  return resolveRetentionPolicy(
    definedOnly({
      outboxDays: optionalInt(env, 'POSTBOX_OUTBOX_RETENTION_DAYS', 1),
      inboxDays:
        env.POSTBOX_INBOX_RETENTION_DAYS === 'forever' ? null : optionalInt(env, 'POSTBOX_INBOX_RETENTION_DAYS', 1),
      failurePayloadDays: optionalInt(env, 'POSTBOX_FAILURE_RETENTION_DAYS', 1),
      sagaDays: optionalInt(env, 'POSTBOX_SAGA_RETENTION_DAYS', 1),
      archiveDir: resolve(env.POSTBOX_ARCHIVE_DIR || 'postbox-archive'),
    }) as Partial<RetentionPolicy> & { archiveDir: string },
  );
}

function onOff(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (raw === 'on') return true;
  if (raw === 'off') return false;
  throw new ConfigError(`${name} must be on or off, got "${raw}"`);
}

function kafkaConnection(brokers: string, env: NodeJS.ProcessEnv): KafkaConnection {
  const connection: KafkaConnection = { brokers: parseBrokers(brokers), clientId: env.KAFKA_CLIENT_ID ?? 'postbox' };
  if (connection.brokers.length === 0) throw new ConfigError('KAFKA_BROKERS must list at least one host:port');
  if (kafkaSsl(env)) connection.ssl = true;
  // A private CA: certificates and host names are still verified, against it instead of the system's CAs.
  if (env.KAFKA_SSL_CA) connection.ssl = { ca: [readCaFile(env.KAFKA_SSL_CA, 'KAFKA_SSL_CA')] };
  const mechanism = env.KAFKA_SASL_MECHANISM;
  if (mechanism) {
    if (!['plain', 'scram-sha-256', 'scram-sha-512'].includes(mechanism)) {
      throw new ConfigError(`KAFKA_SASL_MECHANISM must be plain, scram-sha-256 or scram-sha-512, got "${mechanism}"`);
    }
    connection.sasl = {
      mechanism,
      username: env.KAFKA_SASL_USERNAME ?? '',
      password: env.KAFKA_SASL_PASSWORD ?? '',
    } as KafkaConnection['sasl'];
  }
  return connection;
}

/** POSTBOX_KAFKA_PUBLISHER: the client the relay publishes with (the consumer reads with kafkajs either way). */
function kafkaPublisherClient(env: NodeJS.ProcessEnv): 'kafkajs' | 'platformatic' {
  const raw = env.POSTBOX_KAFKA_PUBLISHER;
  if (raw === undefined || raw === '' || raw === 'kafkajs') return 'kafkajs';
  if (raw === 'platformatic') return 'platformatic';
  throw new ConfigError(`POSTBOX_KAFKA_PUBLISHER must be kafkajs or platformatic, got "${raw}"`);
}

function readCaFile(file: string, variable: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (cause) {
    throw new ConfigError(`${variable}=${file} cannot be read (a PEM file of CA certificates)`, { cause });
  }
}

/** "orders.events:12,payments:6" → topics with partition counts. */
export function parseTopics(value: string): TopicSpec[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const [topic, partitions = '12'] = entry.split(':');
      const count = Number(partitions);
      if (!topic || !/^[A-Za-z0-9._-]{1,249}$/.test(topic) || !Number.isInteger(count) || count < 1) {
        throw new ConfigError(`POSTBOX_TOPICS entry "${entry}" must be topic[:partitions], e.g. orders.events:12`);
      }
      return { topic, partitions: count };
    });
}

function optionalInt(env: NodeJS.ProcessEnv, name: string, min = 1): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min)
    throw new ConfigError(`${name} must be an integer ≥ ${min}, got "${raw}"`);
  return value;
}

function optionalRate(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0)
    throw new ConfigError(`${name} must be a number per second ≥ 0 (0 = off), e.g. 2 or 0.5, got "${raw}"`);
  return value;
}

function optionalShare(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0 || value > 1)
    throw new ConfigError(`${name} must be a share between 0 and 1 (e.g. 0.1 for 10 %), got "${raw}"`);
  return value;
}

function optionalPrefix(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  if (!/^[A-Za-z0-9._-]{1,200}$/.test(raw))
    throw new ConfigError(`${name} must be a Kafka topic name prefix (1–200 letters, digits, . _ -), got "${raw}"`);
  return raw;
}

function definedOnly<T extends object>(values: T): { [K in keyof T]?: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(values).filter(([, v]) => v !== undefined)) as {
    [K in keyof T]?: Exclude<T[K], undefined>;
  };
}

function brokerConnection(kind: BrokerKind, links: LinkEnv, env: NodeJS.ProcessEnv): BrokerConnection {
  switch (kind) {
    case 'kafka':
      return {
        kind,
        kafka: kafkaConnection(requireLink(links, 'KAFKA_BROKERS', 'your Kafka brokers, host:port,…'), env),
        publisher: kafkaPublisherClient(env),
      };
    case 'nats': {
      const url = requireLink(links, 'NATS_URL', 'your NATS servers (POSTBOX_BROKER=nats)');
      // NATS_TLS_CA, or a tls:// server: TLS required (else only when the server asks for it).
      const tls = env.NATS_TLS_CA
        ? { ca: readCaFile(env.NATS_TLS_CA, 'NATS_TLS_CA') }
        : url.includes('tls://')
          ? {}
          : undefined;
      return { kind, nats: { servers: parseNatsServers(url), ...(tls ? { tls } : {}) } };
    }
    case 'rabbitmq':
      return {
        kind,
        rabbitmq: { url: requireLink(links, 'RABBITMQ_URL', 'your RabbitMQ, amqp://… (POSTBOX_BROKER=rabbitmq)') },
      };
  }
}
