import type { TopicPartition } from './subscriber.ts';

/**
 * Who in a consumer group reads which partition, for brokers that have no group coordinator Postbox can use (NATS
 * JetStream before 2.11's pinned consumers; RabbitMQ's single-active-consumer is per queue only). A subscriber
 * reads exactly the partitions it is told it holds, and stops reading one as soon as it is told it lost it.
 */
export interface PartitionAssignment {
  /**
   * Joins the group with every partition of its topics. `onChange` gets the complete set this member holds,
   * whenever that set changes (the empty set when it can no longer prove it holds any); its promise resolves once
   * the subscriber has stopped reading what it lost — only then are those partitions given back. Resolves once
   * the first share has been taken.
   */
  join(partitions: TopicPartition[], onChange: (held: TopicPartition[]) => Promise<void>): Promise<void>;
  /** Gives every partition back and leaves the group, so the others take them at once. Idempotent. */
  leave(): Promise<void>;
}
