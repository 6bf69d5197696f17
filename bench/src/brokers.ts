import { AMQPClient } from '@cloudamqp/amqp-client';
import { ensureExchanges, queueName } from '@postbox/engine/rabbitmq';
import type { BrokerConnection } from '@postbox/workers';
import { benchTopic, deleteTopics, kafka, nats, natsBenchTopic, stack } from './support.ts';

/** The brokers a run can measure (`--broker`). */
export const BENCH_BROKERS = ['kafka', 'nats', 'rabbitmq'] as const;
export type BenchBroker = (typeof BENCH_BROKERS)[number];

export const rabbitmq = { url: stack.RABBITMQ_URL };

/** How each broker is named in rows and result keys. */
export const BROKER_LABEL: Record<BenchBroker, string> = {
  kafka: 'Kafka',
  nats: 'NATS JetStream',
  rabbitmq: 'RabbitMQ',
};

export function brokerConnection(broker: BenchBroker): BrokerConnection {
  switch (broker) {
    case 'kafka':
      return { kind: 'kafka', kafka, publisher: kafkaPublisherClient() };
    case 'nats':
      return { kind: 'nats', nats };
    case 'rabbitmq':
      return { kind: 'rabbitmq', rabbitmq };
  }
}

/**
 * The Kafka client the relays of the pipeline scenarios (drain, e2e, latency, scale, backlog) publish with, as
 * for `postbox relay`: POSTBOX_KAFKA_PUBLISHER (kafkajs unless set; spawned roles inherit it). The relay scenario
 * measures both every run.
 */
export function kafkaPublisherClient(): 'kafkajs' | 'platformatic' {
  const raw = process.env.POSTBOX_KAFKA_PUBLISHER;
  if (raw === undefined || raw === '' || raw === 'kafkajs') return 'kafkajs';
  if (raw === 'platformatic') return 'platformatic';
  throw new Error(`POSTBOX_KAFKA_PUBLISHER must be kafkajs or platformatic, got "${raw}"`);
}

/** What a spawned `postbox relay` or `postbox consume` needs to reach the broker (the stack's servers). */
export function brokerEnv(broker: BenchBroker): Record<string, string> {
  return { POSTBOX_BROKER: broker, NATS_URL: stack.NATS_URL, RABBITMQ_URL: stack.RABBITMQ_URL };
}

/** A topic of its own on one broker for one measurement, removed by drop(). */
export interface BrokerTopic {
  broker: BenchBroker;
  topic: string;
  partitions: ReadonlyMap<string, number>;
  drop(): Promise<void>;
}

/**
 * Makes a topic: a Kafka topic, NATS streams (one per partition), or a RabbitMQ exchange with the quorum queues
 * of `groups` (RabbitMQ keeps no log: a group's queues must be there before anything is published).
 */
export async function brokerTopic(
  broker: BenchBroker,
  prefix: string,
  partitions: number,
  groups: string[] = [],
): Promise<BrokerTopic> {
  if (broker === 'kafka') {
    const topic = await benchTopic(prefix, partitions);
    return {
      broker,
      topic,
      partitions: new Map([[topic, partitions]]),
      drop: () => deleteTopics([topic]),
    };
  }
  if (broker === 'nats') return { broker, ...(await natsBenchTopic(prefix, partitions)) };
  const topic = `bench.${prefix}.${Math.random().toString(16).slice(2, 10)}`;
  const counts = await ensureExchanges(rabbitmq, [{ topic, partitions }], groups).catch((cause: unknown) => {
    throw new Error(`bench: could not declare ${topic} on RabbitMQ`, { cause });
  });
  return {
    broker,
    topic,
    partitions: counts,
    drop: async () => {
      const client = await new AMQPClient(rabbitmq.url).connect();
      try {
        const ch = await client.channel();
        for (const group of groups)
          for (let p = 0; p < partitions; p++) await ch.queueDelete(queueName(topic, group, p));
        await ch.exchangeDelete(topic);
      } finally {
        await client.close().catch(() => {});
      }
    },
  };
}
