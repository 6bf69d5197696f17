import { createKafka, type KafkaConnection } from './client.ts';
import { classifyKafkaError } from './classify.ts';

export interface TopicSpec {
  topic: string;
  /** @defaultValue 12 */
  partitions?: number;
  /** @defaultValue 1 */
  replicationFactor?: number;
  /** Passed to the broker, e.g. { 'min.insync.replicas': '2' }. */
  config?: Record<string, string>;
}

/**
 * Creates the topics that are missing, with the configured partition count, and waits for their leaders.
 * Nothing in Postbox relies on broker auto-create. Returns the partition count of every topic.
 */
export async function ensureTopics(connection: KafkaConnection, specs: TopicSpec[]): Promise<Map<string, number>> {
  const admin = createKafka(connection).admin();
  try {
    await admin.connect();
    const existing = new Set(await admin.listTopics());
    const missing = specs.filter((s) => !existing.has(s.topic));
    if (missing.length > 0) {
      await admin.createTopics({
        waitForLeaders: true,
        topics: missing.map((s) => ({
          topic: s.topic,
          numPartitions: s.partitions ?? 12,
          replicationFactor: s.replicationFactor ?? 1,
          configEntries: Object.entries(s.config ?? {}).map(([name, value]) => ({ name, value })),
        })),
      });
    }
    const { topics } = await admin.fetchTopicMetadata({ topics: specs.map((s) => s.topic) });
    return new Map(topics.map((t) => [t.name, t.partitions.length]));
  } catch (cause) {
    throw classifyKafkaError(cause);
  } finally {
    await admin.disconnect().catch(() => {});
  }
}
