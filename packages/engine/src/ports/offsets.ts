import type { BrokerHealthReport } from './broker-health.ts';

/** One partition's positions: the end of the log and, for a group, its committed offset (next to read). */
export interface PartitionPosition {
  topic: string;
  partition: number;
  /** The high watermark: the next offset to be written. */
  high: string;
  /** The group's committed offset, or null when it has committed none. */
  committed: string | null;
}

/** How long the broker keeps a topic's records, so it can deliver them again. */
export interface TopicRetention {
  topic: string;
  /** The longest a record can stay, in ms; null: forever (compacted, or no limit); 0: gone once consumed. */
  retentionMs: number | null;
  /** Where the figure comes from (the broker's settings), for an operator. */
  source: string;
}

/**
 * The control plane's door to broker positions (read-only): end offsets of topics and committed offsets of
 * consumer groups, for lag and rates; how long topics keep their records, for retention.
 */
export interface BrokerOffsets {
  positions(groupId: string | null, topics: string[]): Promise<PartitionPosition[]>;
  /** Each topic's effective retention. Throws with the cause when the broker cannot say. */
  retention(topics: string[]): Promise<TopicRetention[]>;
  /** Answers when the broker does; throws with the cause otherwise. */
  ping(): Promise<void>;
  /**
   * The replica health of `topics` (under-replicated, offline, ISR below min.insync.replicas) and whether each
   * node answers. Never throws: a failed probe is a report that says why. Absent where the broker has no such
   * notion to read (Kafka has it; NATS and RabbitMQ do not, here).
   */
  health?(topics: string[]): Promise<BrokerHealthReport>;
  close(): Promise<void>;
}
