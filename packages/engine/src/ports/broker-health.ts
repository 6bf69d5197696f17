/**
 * How healthy the broker's copies of Postbox's topics are, as one probe saw them (design §10, the seed's §17:
 * "the broker: backlog, redeliveries, disk and replicas"). Broker-neutral in shape; Kafka fills it from the
 * topics' metadata (leader, replicas, in-sync replicas) and the topics' min.insync.replicas.
 */

/**
 * One node of the cluster, and whether it answered the probe itself: each live broker the metadata lists, and each
 * node that holds replicas of Postbox's topics but is no longer listed (fenced after its session ended).
 */
export interface BrokerNodeHealth {
  id: number;
  /** host:port as the cluster advertises it; empty for a node no longer listed. */
  address: string;
  /** It accepted a connection of its own and answered the client's first request within the probe's deadline. */
  reachable: boolean;
  /** Why it did not answer, or null. */
  error: string | null;
}

/** One topic's partitions, counted. A replica on a node that did not answer is not counted as in sync. */
export interface TopicReplicaHealth {
  topic: string;
  partitions: number;
  /** The largest replica set among the partitions (the topic's replication factor). */
  replicationFactor: number;
  /** The topic's effective min.insync.replicas; null when the broker did not say. */
  minInsyncReplicas: number | null;
  /** Partitions with fewer in-sync replicas than replicas: one more loss and they may stall. */
  underReplicated: number;
  /** Partitions without a leader that answers: neither readable nor writable. */
  offline: number;
  /**
   * Partitions with fewer in-sync replicas than min.insync.replicas: every acks=all write to them is refused
   * (NOT_ENOUGH_REPLICAS) or times out, so the relay cannot publish to them.
   */
  belowMinInsync: number;
  /** The smallest in-sync replica count among the partitions (0 with a partition offline). */
  minIsr: number;
  /** Why this topic could not be read (unknown topic, …), or null; its counts are then 0. */
  error: string | null;
}

/** One probe's result. A probe that failed as a whole (no broker answered) has `ok` false and says why. */
export interface BrokerHealthReport {
  at: Date;
  ok: boolean;
  error: string | null;
  brokers: BrokerNodeHealth[];
  topics: TopicReplicaHealth[];
}
