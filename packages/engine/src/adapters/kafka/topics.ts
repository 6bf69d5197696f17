import { setTimeout as sleep } from 'node:timers/promises';
import type { Admin } from 'kafkajs';
import { createKafka, type KafkaConnection } from './client.ts';
import { classifyKafkaError } from './classify.ts';

export interface TopicSpec {
  topic: string;
  /** @defaultValue 12 */
  partitions?: number;
  /**
   * Copies of each partition. @defaultValue the live brokers at creation, at most 3: 1 on one broker, 3 on a
   * cluster, whose min.insync.replicas (2) would refuse every acks=all write to a topic of fewer replicas.
   */
  replicationFactor?: number;
  /** Passed to the broker, e.g. { 'min.insync.replicas': '2' }. */
  config?: Record<string, string>;
}

/** The most replicas a topic gets by default: every record on three nodes; more buys nothing on a small cluster. */
export const MAX_DEFAULT_REPLICATION_FACTOR = 3;

/**
 * Creates the topics that are missing, with the configured partition count and replication factor, and waits for
 * their leaders. Nothing in Postbox relies on broker auto-create. Returns the partition count of every topic.
 * Without a replication factor the live brokers decide (at most 3): a cluster with a node down at that moment
 * makes a topic of fewer replicas, so a deployment that cares names it.
 */
export async function ensureTopics(connection: KafkaConnection, specs: TopicSpec[]): Promise<Map<string, number>> {
  const admin = createKafka(connection).admin();
  try {
    await admin.connect();
    const existing = new Set(await admin.listTopics());
    const missing = specs.filter((s) => !existing.has(s.topic));
    if (missing.length > 0) {
      const live = missing.some((s) => s.replicationFactor === undefined)
        ? (await admin.describeCluster()).brokers.length
        : 1;
      const defaultFactor = Math.max(1, Math.min(MAX_DEFAULT_REPLICATION_FACTOR, live));
      await admin.createTopics({
        // kafkajs waits by asking one broker, and bails when that one has not learnt of the new topic yet
        // (UNKNOWN_TOPIC_OR_PARTITION, usual on a KRaft cluster): awaitLeaders waits through it instead.
        waitForLeaders: false,
        topics: missing.map((s) => ({
          topic: s.topic,
          numPartitions: s.partitions ?? 12,
          replicationFactor: s.replicationFactor ?? defaultFactor,
          configEntries: Object.entries(s.config ?? {}).map(([name, value]) => ({ name, value })),
        })),
      });
    }
    // Only the topics made here are waited for: an existing topic with a partition offline (a broker down) must
    // not keep a relay or consumer from starting on the partitions that are up.
    const made =
      missing.length > 0
        ? await awaitLeaders(
            admin,
            missing.map((s) => s.topic),
          )
        : [];
    const known = specs.filter((s) => existing.has(s.topic)).map((s) => s.topic);
    const { topics } = known.length > 0 ? await admin.fetchTopicMetadata({ topics: known }) : { topics: [] };
    return new Map([...made, ...topics].map((t) => [t.name, t.partitions.length]));
  } catch (cause) {
    throw classifyKafkaError(cause);
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

/** Broker errors that mean "the metadata has not reached this broker yet". */
const NOT_YET = new Set(['UNKNOWN_TOPIC_OR_PARTITION', 'LEADER_NOT_AVAILABLE']);

/** The topics' metadata once every partition has a leader; throws after `timeoutMs` with the last error. */
async function awaitLeaders(admin: Admin, topics: string[], timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const meta = await admin.fetchTopicMetadata({ topics });
      if (meta.topics.every((t) => t.partitions.every((p) => p.leader >= 0))) return meta.topics;
      if (Date.now() > deadline) throw new Error(`no leader for every partition of ${topics.join(', ')} yet`);
    } catch (err) {
      if (!NOT_YET.has((err as { type?: string }).type ?? '') || Date.now() > deadline) throw err;
    }
    await sleep(100);
  }
}
