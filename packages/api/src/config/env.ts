import { ConfigError, parseBrokers, resolveRelayOptions, type KafkaConnection, type RelayOptions, type TopicSpec } from '@postbox/engine';
import type { SASLOptions } from 'kafkajs';
import type { StackEnv } from '../stack/index.ts';

/**
 * Every setting Postbox reads from the environment, resolved once and validated with messages that say how to
 * fix them. Only entry files call this; components take the resolved object.
 */
export interface PostboxConfig {
  databaseUrl: string;
  redisUrl: string;
  kafka: KafkaConnection;
  topics: TopicSpec[];
  relay: RelayOptions;
  relayThreads: number;
  logLevel: string;
  demoRate: number;
  /** How often each consumer checks its retry ledger against the scheduler's jobs. */
  retryReconcileMs: number;
  /**
   * Consumer group session: a member silent this long is dropped and its partitions move (a crashed process
   * holds them until then). Within the broker's group.min/max.session.timeout.ms.
   */
  kafkaSessionTimeoutMs: number;
  kafkaHeartbeatMs: number;
}

export function readConfig(stack: StackEnv, env: NodeJS.ProcessEnv = process.env): PostboxConfig {
  return {
    databaseUrl: stack.DATABASE_URL,
    redisUrl: stack.REDIS_URL,
    kafka: kafkaConnection(stack.KAFKA_BROKERS, env),
    topics: parseTopics(env.POSTBOX_TOPICS ?? 'orders.events:12'),
    relay: resolveRelayOptions({
      batchSize: int(env, 'POSTBOX_RELAY_BATCH_SIZE', 500),
      leaseMs: int(env, 'POSTBOX_RELAY_LEASE_MS', 30_000),
      laneLeaseMs: int(env, 'POSTBOX_RELAY_LANE_LEASE_MS', 10_000),
      pollMs: int(env, 'POSTBOX_RELAY_POLL_MS', 1000),
      maxInFlight: int(env, 'POSTBOX_RELAY_IN_FLIGHT', 4),
      maxAttempts: int(env, 'POSTBOX_RELAY_MAX_ATTEMPTS', 50),
    }),
    relayThreads: int(env, 'POSTBOX_RELAY_THREADS', 2, 0),
    logLevel: env.LOG_LEVEL ?? 'info',
    demoRate: int(env, 'POSTBOX_DEMO_RATE', 50, 0),
    retryReconcileMs: int(env, 'POSTBOX_RETRY_RECONCILE_MS', 60_000, 1000),
    kafkaSessionTimeoutMs: int(env, 'POSTBOX_KAFKA_SESSION_TIMEOUT_MS', 30_000, 1000),
    kafkaHeartbeatMs: int(env, 'POSTBOX_KAFKA_HEARTBEAT_MS', 3000, 100),
  };
}

function kafkaConnection(brokers: string, env: NodeJS.ProcessEnv): KafkaConnection {
  const connection: KafkaConnection = { brokers: parseBrokers(brokers), clientId: env.KAFKA_CLIENT_ID ?? 'postbox' };
  if (connection.brokers.length === 0) throw new ConfigError('KAFKA_BROKERS must list at least one host:port');
  if (env.KAFKA_SSL === 'true') connection.ssl = true;
  const mechanism = env.KAFKA_SASL_MECHANISM;
  if (mechanism) {
    if (!['plain', 'scram-sha-256', 'scram-sha-512'].includes(mechanism)) {
      throw new ConfigError(`KAFKA_SASL_MECHANISM must be plain, scram-sha-256 or scram-sha-512, got "${mechanism}"`);
    }
    connection.sasl = {
      mechanism,
      username: env.KAFKA_SASL_USERNAME ?? '',
      password: env.KAFKA_SASL_PASSWORD ?? '',
    } as SASLOptions;
  }
  return connection;
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

function int(env: NodeJS.ProcessEnv, name: string, fallback: number, min = 1): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) throw new ConfigError(`${name} must be an integer ≥ ${min}, got "${raw}"`);
  return value;
}
