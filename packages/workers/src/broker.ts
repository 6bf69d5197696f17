import { ensureTopics, KafkaPublisher, type KafkaConnection, type TopicSpec } from '@postbox/engine/kafka';
import { ensureStreams, NatsPublisher, type NatsConnectionOptions } from '@postbox/engine/nats';
import type { Publisher } from '@postbox/engine/runtime';

/** The broker a relay publishes to (POSTBOX_BROKER): plain data, so it crosses into worker threads. */
export type BrokerConnection =
  | { kind: 'kafka'; kafka: KafkaConnection }
  | { kind: 'nats'; nats: NatsConnectionOptions };

/**
 * Makes what the topics need on the broker, when missing — Kafka topics, or NATS JetStream streams (one per
 * partition) — and returns each topic's partition count. Throws with the broker's error when it is not ready.
 */
export function ensureBrokerTopics(broker: BrokerConnection, topics: TopicSpec[]): Promise<Map<string, number>> {
  return broker.kind === 'kafka' ? ensureTopics(broker.kafka, topics) : ensureStreams(broker.nats, topics);
}

/** A publisher for the broker; `partitions` (from ensureBrokerTopics) spares NATS a lookup per topic. */
export function createPublisher(
  broker: BrokerConnection,
  partitions: ReadonlyMap<string, number>,
  role: string,
): Publisher {
  if (broker.kind === 'kafka')
    return new KafkaPublisher({ ...broker.kafka, clientId: `${broker.kafka.clientId ?? 'postbox'}-${role}` });
  return new NatsPublisher({ ...broker.nats, name: `${broker.nats.name ?? 'postbox'}-${role}`, partitions });
}
