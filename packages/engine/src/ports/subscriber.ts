import type { MessageHeaders } from '../envelope/headers.ts';

/**
 * One record as the broker delivered it. `value` is the raw bytes; `headers` are broker-neutral (envelope/headers.ts):
 * the adapter maps its protocol binding's names back, and leaves out headers outside the binding.
 */
export interface InboundRecord {
  topic: string;
  partition: number;
  /** A decimal string: Kafka offsets are 64-bit. */
  offset: string;
  key: string | null;
  value: Buffer | null;
  headers: MessageHeaders;
}

export interface TopicPartition {
  topic: string;
  partition: number;
}

export interface PartitionLag extends TopicPartition {
  /** Next offset the group will read (its committed offset), or null when it has committed none. */
  committed: string | null;
  /** The partition's high watermark (next offset to be written). */
  high: string;
  lag: number;
}

/** What a subscriber calls back into. Callbacks must not throw; `onRecords` must return quickly. */
export interface SubscriberSink {
  /**
   * Records of one partition, in offset order. Records at or below one already delivered may come again.
   * Returns how many of them (a prefix) were taken; the rest are fetched again later (after `resume`).
   */
  onRecords(records: InboundRecord[]): number;
  /** The complete current assignment after a (re)join: partitions not in it are revoked. */
  onAssignment(partitions: TopicPartition[]): void;
}

/**
 * The only door from a broker into Postbox for receiving (the Watermill shape).
 *
 * Contract:
 * - Delivery is at least once: after a restart or rebalance, records after the last committed offset come
 *   again. Positions are never committed by the subscriber itself, only by `commit`.
 * - `commit` stores "next offset to read" per partition; callers commit only durable work. A commit for a
 *   partition that is no longer assigned is dropped by the caller, not sent. Failures to commit are reported,
 *   never retried across calls by the adapter (the next commit carries a higher offset anyway).
 * - `pause`/`resume` stop and restart fetching of partitions (backpressure); records already handed over stay.
 * - `close` is idempotent: stops fetching and leaves the group.
 */
export interface Subscriber {
  start(sink: SubscriberSink): Promise<void>;
  commit(offsets: Array<TopicPartition & { offset: string }>): Promise<void>;
  pause(partitions: TopicPartition[]): void;
  resume(partitions: TopicPartition[]): void;
  /** Lag per assigned partition; may cost a broker round trip. */
  lag(): Promise<PartitionLag[]>;
  close(): Promise<void>;
}
