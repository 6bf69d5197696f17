import { connect, defineConsumer, type ConsumerLimits, type Sql } from '@postbox/engine';
import { KafkaSubscriber } from '@postbox/engine/kafka';
import {
  Consumer,
  inlineExecutor,
  Relay,
  resolveRelayOptions,
  type ConsumerStats,
  type Publisher,
  type RelayOptions,
} from '@postbox/engine/runtime';
import { createConsumePool, createPublisher, createPublishPool, type BrokerConnection } from '@postbox/workers';
import { kafka, trackGroup, type BenchDatabase } from '../support.ts';

/** An in-process relay, set up the way `postbox relay` sets it up (relay-role.ts), plus its own pool. */
export interface RunningRelay {
  relay: Relay;
  stop(): Promise<void>;
}

export async function startRelay(
  db: BenchDatabase,
  o: {
    threads: number;
    batch: number;
    publisher?: Publisher;
    relay?: Partial<RelayOptions>;
    /** @defaultValue the bench's Kafka */
    broker?: BrokerConnection;
    /** Partitions per topic (NATS places keys by them). */
    partitions?: ReadonlyMap<string, number>;
  },
): Promise<RunningRelay> {
  const options = resolveRelayOptions({ batchSize: o.batch, ...o.relay });
  const broker: BrokerConnection = o.broker ?? { kind: 'kafka', kafka };
  const partitions = o.partitions ?? new Map<string, number>();
  const sql = connect({ url: db.url, max: 4, applicationName: 'postbox-relay' });
  const executor =
    o.threads === 0
      ? inlineExecutor({ sql, publisher: o.publisher ?? createPublisher(broker, partitions, 'relay'), options })
      : createPublishPool({ databaseUrl: db.url, broker, partitions, relay: options, threads: o.threads });
  const relay = new Relay({ sql, executor, options });
  await relay.start();
  return {
    relay,
    async stop() {
      await relay.stop();
      await sql.end({ timeout: 5 });
    },
  };
}

/**
 * An in-process consumer with a piscina pool, as consume-command.ts builds it (no durable retries: none fail); the
 * demo projection unless another handler module is given.
 */
export async function startConsumer(
  db: BenchDatabase,
  o: { name: string; topic: string; threads: number; limits?: Partial<ConsumerLimits>; handler?: URL },
): Promise<Consumer> {
  const definition = defineConsumer({
    name: o.name,
    topics: [o.topic],
    handler: o.handler ?? new URL('./projection-handler.ts', import.meta.url),
    limits: { threads: o.threads, ...o.limits },
  });
  const consumer = new Consumer({
    definition,
    subscriber: new KafkaSubscriber({
      ...kafka,
      clientId: 'postbox-bench-consumer',
      groupId: trackGroup(definition.groupId),
      topics: [o.topic],
    }),
    executor: createConsumePool({ databaseUrl: db.url, definition }),
    lagIntervalMs: 0,
  });
  await consumer.start();
  return consumer;
}

/** Events a consumer has committed the effect of (applied at once, or applied when its gap closed). */
export const committed = (s: ConsumerStats) => s.applied + s.drained;

/** Rows still to publish: read through the partial ready index, so cheap even on a large outbox. */
export async function unpublished(sql: Sql): Promise<number> {
  const [row] = await sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_outbox WHERE status IN ('pending', 'publishing')`;
  return row!.n;
}
