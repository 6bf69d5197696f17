import { Writable } from 'node:stream';
import { createLogger, defineConsumer, connect, type ConsumerInput, type Logger, type Sql } from '@postbox/engine';
import { KafkaPublisher, KafkaSubscriber } from '@postbox/engine/kafka';
import {
  Consumer,
  inlineConsumeExecutor,
  inlineExecutor,
  Relay,
  resolveRelayOptions,
  type RelayOptions,
} from '@postbox/engine/runtime';
import { BullmqRetryScheduler } from '@postbox/engine/bullmq';
import { stack } from '../support/stack.ts';

export const TRACED_HANDLER = new URL('./fixtures/traced-handler.ts', import.meta.url);

/** Every JSON line the loggers write, as text: what an operator's log pipeline would receive. */
export function captureLog(): { log: Logger; lines: () => string[] } {
  const lines: string[] = [];
  let partial = '';
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      partial += chunk.toString();
      const parts = partial.split('\n');
      partial = parts.pop()!;
      lines.push(...parts.filter(Boolean));
      done();
    },
  });
  return { log: createLogger({ level: 'info', name: 'telemetry-test', destination }), lines: () => [...lines] };
}

export async function createAppliedTable(sql: Sql): Promise<void> {
  await sql`CREATE TABLE IF NOT EXISTS telemetry_applied (consumer text NOT NULL, event_id uuid NOT NULL, aggregate_id text NOT NULL,
    version bigint NOT NULL, attempt int NOT NULL, PRIMARY KEY (consumer, event_id))`;
}

/** A relay on this thread (inline executor), so its spans reach this process's exporter. */
export async function startInlineRelay(sql: Sql, log: Logger, options: Partial<RelayOptions> = {}): Promise<Relay> {
  const resolved = resolveRelayOptions({ pollMs: 200, ...options });
  const publisher = new KafkaPublisher({
    brokers: stack.KAFKA_BROKERS.split(','),
    clientId: 'postbox-telemetry-test-relay',
  });
  const relay = new Relay({
    sql,
    executor: inlineExecutor({ sql, publisher, options: resolved }),
    options: resolved,
    log,
  });
  await relay.start();
  return relay;
}

/** A consumer on this thread, with durable retries (the stack's Redis) when `durable`. */
export async function startInlineConsumer(
  databaseUrl: string,
  input: ConsumerInput,
  log: Logger,
  durable = false,
): Promise<{ consumer: Consumer; stop: () => Promise<void> }> {
  const definition = defineConsumer(input);
  const subscriber = new KafkaSubscriber({
    brokers: stack.KAFKA_BROKERS.split(','),
    clientId: 'postbox-telemetry-test-consumer',
    groupId: definition.groupId,
    topics: definition.topics,
    fromBeginning: true,
  });
  const retrySql = durable
    ? connect({ url: databaseUrl, max: 2, applicationName: 'postbox-telemetry-test-retry' })
    : null;
  const retries = retrySql
    ? {
        scheduler: new BullmqRetryScheduler({
          redisUrl: stack.REDIS_URL,
          consumer: definition.name,
          queueName: `postbox-retry-test.${definition.name}`,
        }),
        sql: retrySql,
        reconcileIntervalMs: 60_000,
      }
    : undefined;
  const consumer = new Consumer({
    definition,
    subscriber,
    executor: inlineConsumeExecutor(definition, databaseUrl),
    log,
    lagIntervalMs: 1000,
    ...(retries ? { retries } : {}),
  });
  await consumer.start();
  return {
    consumer,
    async stop() {
      await consumer.stop();
      await retrySql?.end({ timeout: 5 });
    },
  };
}
