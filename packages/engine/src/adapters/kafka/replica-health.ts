import type { TopicReplicaHealth } from '../../ports/broker-health.ts';

/** What replica health reads of a partition's metadata (kafkajs PartitionMetadata has these fields). */
export interface PartitionReplicas {
  partitionId: number;
  /** The leader's node id; -1 without one. */
  leader: number;
  replicas: number[];
  isr: number[];
}

/**
 * One topic's replica health from its partitions' metadata. Pure.
 *
 * `down` are nodes that did not answer the probe: a replica on one of them is not counted as in sync, and a
 * partition it leads counts as offline. The metadata alone lags reality: the controller shrinks an ISR only
 * after the node's session ends (broker.session.timeout.ms), and not at all while the controller quorum is
 * lost (two of three combined nodes down), when the surviving node keeps serving its last, stale view.
 *
 * Invariants: offline ≤ partitions; belowMinInsync ≤ partitions; underReplicated ≤ partitions; minIsr is at
 * most the replication factor, 0 when a partition is offline or the topic has no partitions; a partition with
 * all its replicas in sync and up is counted nowhere.
 */
export function replicaHealth(
  topic: string,
  partitions: readonly PartitionReplicas[],
  minInsyncReplicas: number | null,
  down: ReadonlySet<number> = new Set(),
): TopicReplicaHealth {
  const health: TopicReplicaHealth = {
    topic,
    partitions: partitions.length,
    replicationFactor: 0,
    minInsyncReplicas,
    underReplicated: 0,
    offline: 0,
    belowMinInsync: 0,
    minIsr: partitions.length === 0 ? 0 : Number.MAX_SAFE_INTEGER,
    error: null,
  };
  for (const p of partitions) {
    const replicas = new Set(p.replicas);
    const offline = p.leader < 0 || down.has(p.leader);
    // An ISR member that is not a replica (a reassignment in flight) or does not answer is not a copy to count.
    const inSync = offline ? 0 : new Set(p.isr.filter((id) => replicas.has(id) && !down.has(id))).size;
    health.replicationFactor = Math.max(health.replicationFactor, replicas.size);
    if (offline) health.offline++;
    if (inSync < replicas.size) health.underReplicated++;
    if (minInsyncReplicas !== null && inSync < minInsyncReplicas) health.belowMinInsync++;
    health.minIsr = Math.min(health.minIsr, inSync);
  }
  return health;
}

/** A topic that could not be read: counted as nothing, with the reason. */
export function unreadableTopic(topic: string, error: string): TopicReplicaHealth {
  return {
    topic,
    partitions: 0,
    replicationFactor: 0,
    minInsyncReplicas: null,
    underReplicated: 0,
    offline: 0,
    belowMinInsync: 0,
    minIsr: 0,
    error,
  };
}

/**
 * A topic whose metadata says a partition has no leader (LEADER_NOT_AVAILABLE), which kafkajs reports for the whole
 * topic without the partitions: at least one partition offline (below min.insync.replicas, under-replicated, no
 * ISR), the others unknown. `partitions`: the last count read.
 */
export function leaderlessTopic(
  topic: string,
  partitions: number,
  minInsyncReplicas: number | null,
): TopicReplicaHealth {
  return {
    topic,
    partitions: Math.max(1, partitions),
    replicationFactor: 0,
    minInsyncReplicas,
    underReplicated: 1,
    offline: 1,
    belowMinInsync: 1,
    minIsr: 0,
    error: null,
  };
}
