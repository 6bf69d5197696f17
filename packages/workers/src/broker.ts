import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import type { ConsumerDefinition, Sql } from '@postbox/engine';
import {
  ensureTopics,
  KafkaOffsets,
  KafkaPublisher,
  KafkaSubscriber,
  KafkaTopicReader,
  type KafkaConnection,
  type SubscriberCrash,
  type TopicSpec,
} from '@postbox/engine/kafka';
import { PlatformaticKafkaPublisher } from '@postbox/engine/kafka-platformatic';
import {
  ensureStreams,
  NatsOffsets,
  NatsPublisher,
  NatsSubscriber,
  NatsTopicReader,
  type NatsConnectionOptions,
} from '@postbox/engine/nats';
import {
  ensureExchanges,
  RabbitOffsets,
  RabbitPublisher,
  RabbitSubscriber,
  RabbitTopicReader,
} from '@postbox/engine/rabbitmq';
import { PartitionLeases, type Publisher, type Subscriber } from '@postbox/engine/runtime';
import type { BrokerOffsets, TopicReader } from '@postbox/engine/verify';

/** The broker a relay publishes to (POSTBOX_BROKER): plain data, so it crosses into worker threads. */
export type BrokerConnection =
  | {
      kind: 'kafka';
      kafka: KafkaConnection;
      /** The client the relay publishes with: kafkajs (the default) or @platformatic/kafka. */
      publisher?: 'kafkajs' | 'platformatic';
    }
  | { kind: 'nats'; nats: NatsConnectionOptions }
  | { kind: 'rabbitmq'; rabbitmq: { url: string } };

/** Partitions per topic as POSTBOX_TOPICS gives them (12 when unsaid, as every broker's topic setup makes them). */
export function partitionCounts(topics: TopicSpec[]): Map<string, number> {
  return new Map(topics.map((t) => [t.topic, t.partitions ?? 12]));
}

/**
 * Makes what the topics need on the broker, when missing — Kafka topics, or NATS JetStream streams (one per
 * partition) — and returns each topic's partition count. Throws with the broker's error when it is not ready.
 */
export function ensureBrokerTopics(broker: BrokerConnection, topics: TopicSpec[]): Promise<Map<string, number>> {
  switch (broker.kind) {
    case 'kafka':
      return ensureTopics(broker.kafka, topics);
    case 'nats':
      return ensureStreams(broker.nats, topics);
    case 'rabbitmq':
      return ensureExchanges(broker.rabbitmq, topics);
  }
}

/** A publisher for the broker; `partitions` (from ensureBrokerTopics) spares NATS a lookup per topic. */
export function createPublisher(
  broker: BrokerConnection,
  partitions: ReadonlyMap<string, number>,
  role: string,
): Publisher {
  switch (broker.kind) {
    case 'kafka': {
      const options = { ...broker.kafka, clientId: `${broker.kafka.clientId ?? 'postbox'}-${role}` };
      return broker.publisher === 'platformatic'
        ? new PlatformaticKafkaPublisher(options)
        : new KafkaPublisher(options);
    }
    case 'nats':
      return new NatsPublisher({ ...broker.nats, name: `${broker.nats.name ?? 'postbox'}-${role}`, partitions });
    case 'rabbitmq':
      return new RabbitPublisher({ url: broker.rabbitmq.url, partitions });
  }
}

/** How a consumer's subscriber joins its group and reports trouble. */
export interface SubscriberSettings {
  /** A member silent this long loses its partitions (Kafka's session timeout; NATS: the partition lease). */
  sessionTimeoutMs?: number;
  /** Kafka only. */
  heartbeatIntervalMs?: number;
  /** NATS and RabbitMQ: where the partition leases live (migration 0015); required there. */
  sql?: Sql;
  /** RabbitMQ: partitions per topic (POSTBOX_TOPICS'), for the group's queues; required there. */
  partitions?: ReadonlyMap<string, number>;
  onKafkaCrash: (crash: SubscriberCrash) => void;
  onError: (error: Error, where: string) => void;
}

/**
 * The consumer group member for the broker: a Kafka consumer group; durable JetStream pull consumers, or RabbitMQ
 * quorum queues (one per partition), whose partitions are shared by leases in PostgreSQL (JetStream 2.9 has no
 * exclusive consumer of its own; RabbitMQ's single-active-consumer is per queue).
 */
export function createSubscriber(
  broker: BrokerConnection,
  definition: ConsumerDefinition,
  settings: SubscriberSettings,
): Subscriber {
  if (broker.kind === 'kafka') {
    return new KafkaSubscriber({
      ...broker.kafka,
      clientId: `${broker.kafka.clientId ?? 'postbox'}-consumer`,
      groupId: definition.groupId,
      topics: definition.topics,
      fromBeginning: definition.fromBeginning,
      ...(settings.sessionTimeoutMs === undefined ? {} : { sessionTimeoutMs: settings.sessionTimeoutMs }),
      ...(settings.heartbeatIntervalMs === undefined ? {} : { heartbeatIntervalMs: settings.heartbeatIntervalMs }),
      onCrash: settings.onKafkaCrash,
    });
  }
  if (!settings.sql)
    throw new Error(`a ${broker.kind} consumer needs a PostgreSQL connection for its partition leases`);
  const assignment = new PartitionLeases({
    sql: settings.sql,
    groupId: definition.groupId,
    owner: `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`,
    ...(settings.sessionTimeoutMs === undefined ? {} : { leaseMs: settings.sessionTimeoutMs }),
    onError: (error) => settings.onError(error, 'partition leases'),
  });
  const onError = (error: Error, p: { topic: string; partition: number }) =>
    settings.onError(error, `${p.topic}:${p.partition}`);
  if (broker.kind === 'rabbitmq')
    return new RabbitSubscriber({
      url: broker.rabbitmq.url,
      groupId: definition.groupId,
      topics: definition.topics,
      partitions: settings.partitions ?? new Map(),
      assignment,
      onError,
    });
  return new NatsSubscriber({
    ...broker.nats,
    name: `${broker.nats.name ?? 'postbox'}-consumer`,
    groupId: definition.groupId,
    topics: definition.topics,
    fromBeginning: definition.fromBeginning,
    assignment,
    onError,
  });
}

/**
 * The control plane's and the verifier's read-only view of positions on the broker; `topics` gives RabbitMQ the
 * partition counts of its queues.
 */
export function createBrokerOffsets(broker: BrokerConnection, topics: TopicSpec[] = []): BrokerOffsets {
  switch (broker.kind) {
    case 'kafka':
      return new KafkaOffsets(broker.kafka);
    case 'nats':
      return new NatsOffsets(broker.nats);
    case 'rabbitmq':
      return new RabbitOffsets({ url: broker.rabbitmq.url, partitions: partitionCounts(topics) });
  }
}

/** Reads whole topics start to end, outside any group (the verifier); RabbitMQ keeps no log to read. */
export function createTopicReader(broker: BrokerConnection, timeoutMs: number): TopicReader {
  switch (broker.kind) {
    case 'kafka':
      return new KafkaTopicReader({ ...broker.kafka, timeoutMs });
    case 'nats':
      return new NatsTopicReader({ ...broker.nats, timeoutMs });
    case 'rabbitmq':
      return new RabbitTopicReader();
  }
}
