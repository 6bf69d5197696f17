import { randomBytes } from 'node:crypto';
import { Kafka, logLevel, type IHeaders } from 'kafkajs';
import { stack } from './stack.ts';

/**
 * An independent Kafka client for assertions: plain kafkajs, none of Postbox's code, so a test reads what is
 * really on the topic.
 */
const kafka = (brokers = stack.KAFKA_BROKERS) =>
  new Kafka({ clientId: 'postbox-test-reader', brokers: brokers.split(','), logLevel: logLevel.NOTHING });

export function uniqueTopic(prefix = 'test'): string {
  return `${prefix}.${randomBytes(5).toString('hex')}`;
}

/**
 * A topic of `partitions` partitions; `config` sets topic settings (retention.ms, cleanup.policy …). On the shared
 * stack's broker unless `brokers` names others (a private cluster); `replicationFactor` defaults to the live
 * brokers, at most 3, as Postbox's own topic creation does (ensureTopics).
 */
export async function createTopic(
  topic: string,
  partitions: number,
  config: Record<string, string> = {},
  options: { brokers?: string; replicationFactor?: number } = {},
): Promise<void> {
  const admin = kafka(options.brokers).admin();
  await admin.connect();
  try {
    const replicationFactor = options.replicationFactor ?? Math.min(3, (await admin.describeCluster()).brokers.length);
    await admin.createTopics({
      // kafkajs bails when the one broker it asks has not learnt of the topic yet (a cluster's usual lag).
      waitForLeaders: false,
      topics: [
        {
          topic,
          numPartitions: partitions,
          replicationFactor,
          configEntries: Object.entries(config).map(([name, value]) => ({ name, value })),
        },
      ],
    });
  } finally {
    await admin.disconnect();
  }
  await Promise.all((options.brokers ?? stack.KAFKA_BROKERS).split(',').map((b) => knownTo(b, topic, partitions)));
}

/** Waits until the broker at `address` serves `topic` with a leader for each of its partitions. */
async function knownTo(address: string, topic: string, partitions: number, timeoutMs = 30_000): Promise<void> {
  const admin = kafka(address).admin();
  await admin.connect();
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const meta = await admin.fetchTopicMetadata({ topics: [topic] }).catch(() => null);
      const p = meta?.topics[0]?.partitions ?? [];
      if (p.length === partitions && p.every((x) => x.leader >= 0)) return;
      if (Date.now() > deadline) throw new Error(`${address} does not serve ${topic} within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await admin.disconnect();
  }
}

export interface ReadRecord {
  partition: number;
  offset: string;
  key: string;
  value: Buffer;
  headers: Record<string, string>;
}

/**
 * Reads a topic from the beginning until `until(records)` holds or `timeoutMs` passes, then returns everything
 * read. Records come back in partition/offset order.
 */
export async function readTopic(
  topic: string,
  until: (records: ReadRecord[]) => boolean,
  timeoutMs = 60_000,
): Promise<ReadRecord[]> {
  const consumer = kafka().consumer({ groupId: `reader-${randomBytes(5).toString('hex')}`, maxWaitTimeInMs: 200 });
  const records: ReadRecord[] = [];
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let done!: () => void;
  const finished = new Promise<void>((resolve) => (done = resolve));
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      for (const m of batch.messages) {
        records.push({
          partition: batch.partition,
          offset: m.offset,
          key: m.key?.toString() ?? '',
          value: m.value ?? Buffer.alloc(0),
          headers: headersOf(m.headers),
        });
      }
      if (until(records)) done();
    },
  });
  const timer = setTimeout(done, timeoutMs);
  await finished;
  clearTimeout(timer);
  await consumer.disconnect();
  return records.sort((a, b) => a.partition - b.partition || Number(BigInt(a.offset) - BigInt(b.offset)));
}

function headersOf(headers: IHeaders | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers ?? {}))
    if (v !== undefined) out[k] = Array.isArray(v) ? String(v[0]) : String(v);
  return out;
}
