import { randomBytes } from 'node:crypto';
import { Kafka, logLevel, type IHeaders } from 'kafkajs';
import { stack } from './stack.ts';

/**
 * An independent Kafka client for assertions: plain kafkajs, none of Postbox's code, so a test reads what is
 * really on the topic.
 */
const kafka = () =>
  new Kafka({ clientId: 'postbox-test-reader', brokers: stack.KAFKA_BROKERS.split(','), logLevel: logLevel.NOTHING });

export function uniqueTopic(prefix = 'test'): string {
  return `${prefix}.${randomBytes(5).toString('hex')}`;
}

/** A topic of `partitions` partitions; `config` sets topic settings (retention.ms, cleanup.policy …). */
export async function createTopic(
  topic: string,
  partitions: number,
  config: Record<string, string> = {},
): Promise<void> {
  const admin = kafka().admin();
  await admin.connect();
  try {
    await admin.createTopics({
      waitForLeaders: true,
      topics: [
        {
          topic,
          numPartitions: partitions,
          replicationFactor: 1,
          configEntries: Object.entries(config).map(([name, value]) => ({ name, value })),
        },
      ],
    });
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
