import { randomUUID } from 'node:crypto';
import { BrokerError } from '../../errors.ts';
import type { InboundRecord } from '../../ports/subscriber.ts';
import type { LogBounds, TopicReader } from '../../ports/topic-reader.ts';
import { classifyKafkaError } from './classify.ts';
import { createKafka, type KafkaConnection } from './client.ts';
import { fromKafkaHeaders } from './headers.ts';

export interface KafkaTopicReaderOptions extends KafkaConnection {
  /** How long reading may take before it fails. @defaultValue 120000 */
  timeoutMs?: number;
}

/**
 * TopicReader over a kafkajs consumer in a group of its own (a fresh id per read, deleted afterwards), so no
 * consumer group's offsets are touched. The end offsets are taken before the first fetch; each partition is
 * paused once it reaches its end, and the read ends when every partition has.
 */
export class KafkaTopicReader implements TopicReader {
  readonly #options: KafkaTopicReaderOptions;

  constructor(options: KafkaTopicReaderOptions) {
    this.#options = options;
  }

  async read(topics: string[], onRecord: (record: InboundRecord) => void): Promise<LogBounds[]> {
    const kafka = createKafka({ ...this.#options, clientId: `${this.#options.clientId ?? 'postbox'}-verify` });
    const admin = kafka.admin();
    const groupId = `postbox-verify-${randomUUID()}`;
    const bounds: LogBounds[] = [];
    try {
      await admin.connect();
      for (const topic of topics) {
        for (const p of await admin.fetchTopicOffsets(topic))
          bounds.push({ topic, partition: p.partition, low: p.low, high: p.high });
      }
    } catch (cause) {
      await admin.disconnect().catch(() => {});
      throw new BrokerError(
        'broker_unavailable',
        'transient',
        `reading the end offsets of ${topics.join(', ')} failed: ${(cause as Error).message}`,
        { cause },
      );
    }
    const open = new Map(
      bounds.filter((b) => BigInt(b.high) > BigInt(b.low)).map((b) => [`${b.topic}/${b.partition}`, BigInt(b.high)]),
    );
    // A record fetched again (kafkajs re-fetches after a reconnect) is passed on once.
    const next = new Map<string, bigint>();
    if (open.size === 0) {
      await admin.disconnect().catch(() => {});
      return bounds;
    }
    const consumer = kafka.consumer({
      groupId,
      maxWaitTimeInMs: 200,
      allowAutoTopicCreation: false,
      retry: { retries: 5 },
    });
    const timeoutMs = this.#options.timeoutMs ?? 120_000;
    let timer: NodeJS.Timeout | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        timer = setTimeout(
          () =>
            reject(
              new BrokerError(
                'verify_read_timeout',
                'transient',
                `the log was not read to its end within ${timeoutMs} ms; partitions left: ${[...open.keys()].join(', ')}`,
              ),
            ),
          timeoutMs,
        );
        consumer.on(consumer.events.CRASH, (event) => reject(classifyKafkaError(event.payload.error)));
        (async () => {
          await consumer.connect();
          for (const topic of new Set(
            bounds.filter((b) => open.has(`${b.topic}/${b.partition}`)).map((b) => b.topic),
          )) {
            await consumer.subscribe({ topic, fromBeginning: true });
          }
          await consumer.run({
            autoCommit: false,
            eachBatch: async ({ batch }) => {
              const key = `${batch.topic}/${batch.partition}`;
              const end = open.get(key);
              if (end === undefined) return;
              for (const m of batch.messages) {
                const offset = BigInt(m.offset);
                if (offset >= end) break;
                if (offset < (next.get(key) ?? 0n)) continue;
                next.set(key, offset + 1n);
                onRecord({
                  topic: batch.topic,
                  partition: batch.partition,
                  offset: m.offset,
                  key: m.key === null || m.key === undefined ? null : m.key.toString('utf8'),
                  value: m.value ?? null,
                  headers: fromKafkaHeaders(m.headers),
                });
              }
              if (BigInt(batch.lastOffset()) >= end - 1n) {
                open.delete(key);
                consumer.pause([{ topic: batch.topic, partitions: [batch.partition] }]);
                if (open.size === 0) resolve();
              }
            },
          });
        })().catch((cause: unknown) => reject(classifyKafkaError(cause)));
      });
    } finally {
      clearTimeout(timer);
      await consumer.disconnect().catch(() => {});
      await admin.deleteGroups([groupId]).catch(() => {});
      await admin.disconnect().catch(() => {});
    }
    return bounds;
  }

  async close(): Promise<void> {}
}
