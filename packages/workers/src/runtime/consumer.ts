import { connect, silentLogger, type ConsumerDefinition, type Logger } from '@postbox/engine';
import { KafkaSubscriber, type KafkaConnection } from '@postbox/engine/kafka';
import { BullmqRetryScheduler } from '@postbox/engine/bullmq';
import { Consumer, inlineConsumeExecutor, registerConsumer } from '@postbox/engine/runtime';
import { createConsumePool } from '../consume-pool.ts';

/** What a consumer needs to run in a service, beside its definition. */
export interface ConsumerRuntimeOptions {
  databaseUrl: string;
  kafka: KafkaConnection;
  /** Durable retries (ledger in PostgreSQL, alarm in Redis) when set; in-memory retries otherwise. */
  redisUrl?: string;
  /** A member silent this long is dropped and its partitions move. @defaultValue kafkajs's 30000 */
  sessionTimeoutMs?: number;
  /** @defaultValue kafkajs's 3000 */
  heartbeatIntervalMs?: number;
  /** How often the retry ledger is checked against the scheduler's jobs. @defaultValue 60000 */
  retryReconcileMs?: number;
  /** Run handlers on the calling thread instead of a worker pool. @defaultValue false */
  inline?: boolean;
  log?: Logger;
}

/**
 * Starts one consumer: a Kafka consumer group member, with a piscina pool (or the calling thread when inline),
 * and its durable retry schedule when a Redis URL is given. The returned consumer's `stop()` also closes the
 * retry schedule's pool. A failed start leaves nothing open.
 */
export async function startConsumer(
  definition: ConsumerDefinition,
  options: ConsumerRuntimeOptions,
): Promise<Consumer> {
  const log = options.log ?? silentLogger;
  await announce(options.databaseUrl, definition);
  const subscriber = new KafkaSubscriber({
    ...options.kafka,
    clientId: `${options.kafka.clientId ?? 'postbox'}-consumer`,
    groupId: definition.groupId,
    topics: definition.topics,
    fromBeginning: definition.fromBeginning,
    ...(options.sessionTimeoutMs === undefined ? {} : { sessionTimeoutMs: options.sessionTimeoutMs }),
    ...(options.heartbeatIntervalMs === undefined ? {} : { heartbeatIntervalMs: options.heartbeatIntervalMs }),
    onCrash: ({ error, restart, replaced, retryInMs }) => {
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
  });
  const inline = options.inline === true;
  const executor = inline
    ? inlineConsumeExecutor(definition, options.databaseUrl)
    : createConsumePool({ databaseUrl: options.databaseUrl, definition });
  const retries = options.redisUrl
    ? {
        scheduler: new BullmqRetryScheduler({
          redisUrl: options.redisUrl,
          consumer: definition.name,
          concurrency: inline ? 1 : definition.limits.threads,
        }),
        sql: connect({ url: options.databaseUrl, max: 2, applicationName: `postbox-retry-${definition.name}` }),
        ...(options.retryReconcileMs === undefined ? {} : { reconcileIntervalMs: options.retryReconcileMs }),
      }
    : undefined;
  const consumer = new Consumer({ definition, subscriber, executor, log, ...(retries ? { retries } : {}) });
  try {
    await consumer.start();
  } catch (cause) {
    await consumer.stop().catch(() => {});
    await retries?.sql.end({ timeout: 5 });
    throw cause;
  }
  if (!retries) return consumer;
  // The retry pool closes after the consumer (due retries finish during stop()).
  const stop = consumer.stop.bind(consumer);
  consumer.stop = () => stop().finally(() => retries.sql.end({ timeout: 5 }));
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
