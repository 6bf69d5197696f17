import { connect, silentLogger, type ConsumerDefinition, type Logger, type PayloadKeyRing } from '@postbox/engine';
import { BullmqRetryScheduler } from '@postbox/engine/bullmq';
import { Consumer, inlineConsumeExecutor, registerConsumer } from '@postbox/engine/runtime';
import { createConsumePool } from '../consume-pool.ts';
import { type BrokerConnection, createSubscriber } from '../broker.ts';

/** What a consumer needs to run in a service, beside its definition. */
export interface ConsumerRuntimeOptions {
  databaseUrl: string;
  broker: BrokerConnection;
  /** Durable retries (ledger in PostgreSQL, alarm in Redis) when set; in-memory retries otherwise. */
  redisUrl?: string;
  /** A member silent this long is dropped and its partitions move. @defaultValue kafkajs's 30000; NATS 15000 */
  sessionTimeoutMs?: number;
  /** Partitions per topic (POSTBOX_TOPICS'): RabbitMQ declares the group's queues with them (required there). */
  partitions?: ReadonlyMap<string, number>;
  /** Kafka only. @defaultValue kafkajs's 3000 */
  heartbeatIntervalMs?: number;
  /** How often the retry ledger is checked against the scheduler's jobs. @defaultValue 60000 */
  retryReconcileMs?: number;
  /**
   * Seals what the failure store and the retry ledger keep of an event (POSTBOX_PAYLOAD_KEYS).
   * @defaultValue null: stored in clear
   */
  payloadKeys?: PayloadKeyRing | null;
  /** Run handlers on the calling thread instead of a worker pool. @defaultValue false */
  inline?: boolean;
  log?: Logger;
}

/**
 * Starts one consumer: a member of its group on the broker (a Kafka consumer group, or JetStream durables shared by
 * PostgreSQL leases), with a piscina pool (or the calling thread when inline), and its durable retry schedule
 * when a Redis URL is given. The returned consumer's `stop()` also closes the retry schedule's and the leases'
 * pools. A failed start leaves nothing open.
 */
export async function startConsumer(
  definition: ConsumerDefinition,
  options: ConsumerRuntimeOptions,
): Promise<Consumer> {
  const log = options.log ?? silentLogger;
  await announce(options.databaseUrl, definition);
  // Partition leases (NATS, RabbitMQ) get a connection of their own: a balance must not wait behind a busy pool.
  const leaseSql =
    options.broker.kind !== 'kafka'
      ? connect({
          url: options.databaseUrl,
          max: 1,
          applicationName: `postbox-leases-${definition.name}`,
          // A renewal that hangs fails well within the lease (the leases' watchdog stops reading regardless).
          settings: { statement_timeout: 5000 },
        })
      : null;
  const subscriber = createSubscriber(options.broker, definition, {
    ...(leaseSql ? { sql: leaseSql } : {}),
    ...(options.partitions ? { partitions: options.partitions } : {}),
    ...(options.sessionTimeoutMs === undefined ? {} : { sessionTimeoutMs: options.sessionTimeoutMs }),
    ...(options.heartbeatIntervalMs === undefined ? {} : { heartbeatIntervalMs: options.heartbeatIntervalMs }),
    onKafkaCrash: ({ error, restart, replaced, retryInMs }) => {
      const fields = {
        consumer: definition.name,
        err: error.message,
        error_name: error.name,
        restart,
        replaced,
        retryInMs,
      };
      if (replaced)
        log.error(fields, 'kafka consumer member crashed and kafkajs gave up on it; a new member joins the group');
      else log.warn(fields, 'kafka consumer member crashed; kafkajs restarts it');
    },
    onError: (error, where) =>
      log.warn({ consumer: definition.name, where, err: error.message, error_name: error.name }, 'subscriber error'),
  });
  const inline = options.inline === true;
  const payloadKeys = options.payloadKeys ?? null;
  const executor = inline
    ? inlineConsumeExecutor(definition, options.databaseUrl, payloadKeys)
    : createConsumePool({ databaseUrl: options.databaseUrl, definition, payloadKeys });
  const retries = options.redisUrl
    ? {
        scheduler: new BullmqRetryScheduler({
          redisUrl: options.redisUrl,
          consumer: definition.name,
          concurrency: inline ? 1 : definition.limits.threads,
        }),
        sql: connect({ url: options.databaseUrl, max: 2, applicationName: `postbox-retry-${definition.name}` }),
        ...(options.retryReconcileMs === undefined ? {} : { reconcileIntervalMs: options.retryReconcileMs }),
        payloadKeys,
      }
    : undefined;
  const consumer = new Consumer({ definition, subscriber, executor, log, ...(retries ? { retries } : {}) });
  try {
    await consumer.start();
  } catch (cause) {
    await consumer.stop().catch(() => {});
    await retries?.sql.end({ timeout: 5 });
    await leaseSql?.end({ timeout: 5 });
    throw cause;
  }
  if (!retries && !leaseSql) return consumer;
  // The retry and lease pools close after the consumer (due retries finish, leases are given back, during stop()).
  const stop = consumer.stop.bind(consumer);
  consumer.stop = () =>
    stop().finally(async () => {
      await retries?.sql.end({ timeout: 5 });
      await leaseSql?.end({ timeout: 5 });
    });
  return consumer;
}

/** The control plane finds a consumer's group and topics in the registry (for lag and rates). */
async function announce(databaseUrl: string, definition: ConsumerDefinition): Promise<void> {
  const sql = connect({ url: databaseUrl, max: 1, applicationName: `postbox-consumer-${definition.name}` });
  try {
    await registerConsumer(sql, { name: definition.name, groupId: definition.groupId, topics: definition.topics });
  } finally {
    await sql.end({ timeout: 5 });
  }
}
