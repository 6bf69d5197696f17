import { randomBytes } from 'node:crypto';
import { connect, type Sql } from '@postbox/engine';
import { ensureTopics, KafkaOffsets, KafkaPublisher, KafkaSubscriber, KafkaTopicReader } from '@postbox/engine/kafka';
import { PlatformaticKafkaPublisher } from '@postbox/engine/kafka-platformatic';
import { AMQPClient } from '@cloudamqp/amqp-client';
import { ensureStreams, NatsOffsets, NatsPublisher, NatsSubscriber, NatsTopicReader } from '@postbox/engine/nats';
import {
  ensureExchanges,
  fromAmqpHeaders,
  queueName,
  RABBIT_KEY_HEADER,
  RabbitOffsets,
  RabbitPublisher,
  RabbitSubscriber,
} from '@postbox/engine/rabbitmq';
import { PartitionLeases, type Publisher, type Subscriber } from '@postbox/engine/runtime';
import type { BrokerOffsets, TopicReader } from '@postbox/engine/verify';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { drainQueue } from '../support/rabbitmq.ts';
import { stack } from '../support/stack.ts';

/**
 * What an adapter can and cannot do, declared rather than discovered: the conformance cases read it, and
 * docs/brokers.md shows it as a table.
 */
export interface AdapterFeatures {
  /** The broker drops a re-send of a message id within a window (else the inbox absorbs the duplicate). */
  brokerDedup: boolean;
  /** Who shares partitions in a group: the broker's coordinator, or Postbox's leases in PostgreSQL. */
  assignment: 'broker' | 'lease';
  /** A confirmation names where the message is stored (a log), or only its partition (queues). */
  positions: 'log' | 'none';
  /** The Subscriber port: true, or why not (the subscriber conformance cases then do not apply). */
  subscriber: true | string;
}

/** One broker adapter under test, with the servers it needs. */
export interface AdapterUnderTest {
  name: string;
  features: AdapterFeatures;
  /** Starts what the adapter needs (idempotent). */
  setup(): Promise<void>;
  teardown(): Promise<void>;
  /**
   * Makes a topic with `partitions` partitions, read by `groups` (RabbitMQ keeps no log: a group's queues must be
   * there before anything is published for it).
   */
  createTopic(topic: string, partitions: number, groups?: string[]): Promise<void>;
  publisher(options?: { unreachable?: boolean }): Publisher;
  /** A member of `group` reading `topics`; `member` names it within the group. */
  subscriber(group: string, topics: string[], member: string): Subscriber;
  reader(): TopicReader;
  /** The read-only view of positions and retention (the control plane's, retention's). */
  offsets(): BrokerOffsets;
}

const closing: Array<() => Promise<unknown>> = [];

/** Registers something to close at teardown; returns it. */
function tracked<T extends { close(): Promise<unknown> }>(thing: T): T {
  closing.push(() => thing.close());
  return thing;
}

async function closeAll(): Promise<void> {
  for (const close of closing.splice(0).reverse()) await close().catch(() => {});
}

/** Kafka on the shared test stack. */
export function kafkaAdapter(): AdapterUnderTest {
  const brokers = () => stack.KAFKA_BROKERS.split(',');
  return {
    name: 'kafka',
    features: { brokerDedup: false, assignment: 'broker', positions: 'log', subscriber: true },
    setup: async () => {},
    teardown: closeAll,
    createTopic: async (topic, partitions) => {
      await ensureTopics({ brokers: brokers() }, [{ topic, partitions }]);
    },
    publisher: (options = {}) =>
      tracked(
        new KafkaPublisher({
          brokers: options.unreachable ? ['127.0.0.1:1'] : brokers(),
          clientId: 'postbox-conformance',
        }),
      ),
    subscriber: (group, topics) =>
      tracked(
        new KafkaSubscriber({
          brokers: brokers(),
          clientId: 'postbox-conformance',
          groupId: group,
          topics,
          sessionTimeoutMs: 10_000,
          heartbeatIntervalMs: 500,
        }),
      ),
    reader: () =>
      tracked(new KafkaTopicReader({ brokers: brokers(), clientId: 'postbox-conformance', timeoutMs: 30_000 })),
    offsets: () => tracked(new KafkaOffsets({ brokers: brokers(), clientId: 'postbox-conformance' })),
  };
}

/**
 * Kafka with the relay's other client (POSTBOX_KAFKA_PUBLISHER=platformatic): the publisher over
 * @platformatic/kafka, read back with the kafkajs reader. Publisher only: consumers read with kafkajs.
 */
export function kafkaPlatformaticAdapter(): AdapterUnderTest {
  const kafka = kafkaAdapter();
  return {
    ...kafka,
    name: 'kafka (@platformatic/kafka)',
    features: { ...kafka.features, subscriber: 'publisher only: consumers read with kafkajs' },
    publisher: (options = {}) =>
      tracked(
        new PlatformaticKafkaPublisher({
          brokers: options.unreachable ? ['127.0.0.1:1'] : stack.KAFKA_BROKERS.split(','),
          clientId: 'postbox-conformance',
        }),
      ),
  };
}

/** NATS JetStream on a private server; partitions shared by leases in a fresh database. */
export function natsAdapter(): AdapterUnderTest {
  let nats: PrivateStack | null = null;
  let db: TestDatabase | null = null;
  let sql: Sql | null = null;
  const servers = () => [nats!.nats!.url];
  return {
    name: 'nats',
    features: { brokerDedup: true, assignment: 'lease', positions: 'log', subscriber: true },
    setup: async () => {
      if (nats) return;
      [nats, db] = await Promise.all([startPrivateStack({ nats: true }), freshDatabase()]);
      sql = connect({ url: db.url, max: 4, applicationName: 'postbox-conformance' });
    },
    teardown: async () => {
      await closeAll();
      await sql?.end({ timeout: 5 });
      await nats?.stop();
      await db?.drop();
      [nats, db, sql] = [null, null, null];
    },
    createTopic: async (topic, partitions) => {
      await ensureStreams({ servers: servers() }, [{ topic, partitions }]);
    },
    publisher: (options = {}) =>
      tracked(new NatsPublisher({ servers: options.unreachable ? ['127.0.0.1:1'] : servers() })),
    subscriber: (group, topics, member) =>
      tracked(
        new NatsSubscriber({
          servers: servers(),
          groupId: group,
          topics,
          assignment: new PartitionLeases({ sql: sql!, groupId: group, owner: member, leaseMs: 3000 }),
        }),
      ),
    reader: () => tracked(new NatsTopicReader({ servers: servers(), timeoutMs: 30_000 })),
    offsets: () => tracked(new NatsOffsets({ servers: servers() })),
  };
}

/** The group whose queues a RabbitMQ topic always gets here: the reader drains them. */
const CONFORMANCE_GROUP = 'conformance';

/**
 * RabbitMQ on a private node; partitions shared by leases in a fresh database. A topic is its exchange plus the
 * quorum queues of its groups (RabbitMQ keeps no log: a message no queue takes is refused); the reader drains
 * the conformance group's queues, in queue order, each record's offset its place in its queue.
 */
export function rabbitmqAdapter(): AdapterUnderTest {
  let node: PrivateStack | null = null;
  let db: TestDatabase | null = null;
  let sql: Sql | null = null;
  const url = () => node!.rabbitmq!.url;
  const partitions = new Map<string, number>();
  return {
    name: 'rabbitmq',
    features: { brokerDedup: false, assignment: 'lease', positions: 'none', subscriber: true },
    setup: async () => {
      if (node) return;
      [node, db] = await Promise.all([startPrivateStack({ rabbitmq: true }), freshDatabase()]);
      sql = connect({ url: db.url, max: 4, applicationName: 'postbox-conformance' });
    },
    teardown: async () => {
      await closeAll();
      await sql?.end({ timeout: 5 });
      await node?.stop();
      await db?.drop();
      [node, db, sql] = [null, null, null];
    },
    createTopic: async (topic, count, groups = []) => {
      await ensureExchanges({ url: url() }, [{ topic, partitions: count }], [CONFORMANCE_GROUP, ...groups]);
      partitions.set(topic, count);
    },
    publisher: (options = {}) =>
      tracked(new RabbitPublisher({ url: options.unreachable ? 'amqp://guest:guest@127.0.0.1:1' : url(), partitions })),
    subscriber: (group, topics, member) =>
      tracked(
        new RabbitSubscriber({
          url: url(),
          groupId: group,
          topics,
          partitions,
          assignment: new PartitionLeases({ sql: sql!, groupId: group, owner: member, leaseMs: 3000 }),
        }),
      ),
    offsets: () => tracked(new RabbitOffsets({ url: url(), partitions })),
    reader: () => ({
      read: async (topics, onRecord) => {
        const client = await new AMQPClient(url()).connect();
        try {
          const ch = await client.channel();
          for (const topic of topics)
            for (let p = 0; p < (partitions.get(topic) ?? 0); p++)
              (await drainQueue(ch, queueName(topic, CONFORMANCE_GROUP, p))).forEach((m, offset) => {
                const headers = fromAmqpHeaders(m.properties.headers, m.properties.contentType);
                const key = headers[RABBIT_KEY_HEADER] ?? null;
                delete headers[RABBIT_KEY_HEADER];
                onRecord({
                  topic,
                  partition: p,
                  offset: String(offset),
                  key,
                  value: Buffer.from(m.body ?? []),
                  headers,
                });
              });
        } finally {
          await client.close().catch(() => {});
        }
        return [];
      },
      close: async () => {},
    }),
  };
}

export const ADAPTERS: Array<() => AdapterUnderTest> = [
  kafkaAdapter,
  kafkaPlatformaticAdapter,
  natsAdapter,
  rabbitmqAdapter,
];

export function uniqueName(prefix: string): string {
  return `${prefix}.${randomBytes(5).toString('hex')}`;
}
