/** One partition's positions: the end of the log and, for a group, its committed offset (next to read). */
export interface PartitionPosition {
  topic: string;
  partition: number;
  /** The high watermark: the next offset to be written. */
  high: string;
  /** The group's committed offset, or null when it has committed none. */
  committed: string | null;
}

/**
 * The control plane's door to broker positions (read-only): end offsets of topics and committed offsets of
 * consumer groups, for lag and rates.
 */
export interface BrokerOffsets {
  positions(groupId: string | null, topics: string[]): Promise<PartitionPosition[]>;
  /** Answers when the broker does; throws with the cause otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
