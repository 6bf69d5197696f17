import type { Admin, Consumer as KafkaConsumer } from 'kafkajs';
import { classifyKafkaError } from './classify.ts';
import { createKafka, type KafkaConnection } from './client.ts';
import type { InboundRecord, PartitionLag, Subscriber, SubscriberSink, TopicPartition } from '../../ports/subscriber.ts';
import { headersOf } from './headers.ts';

export interface KafkaSubscriberOptions extends KafkaConnection {
  groupId: string;
  topics: string[];
  /** Where a group with no committed offset starts. @defaultValue true */
  fromBeginning?: boolean;
  /** @defaultValue 30000 */
  sessionTimeoutMs?: number;
  /** @defaultValue 3000 */
  heartbeatIntervalMs?: number;
  /** At least the broker's message size limit, or a large record could never be fetched. @defaultValue 2 MiB + 64 KiB */
  maxBytesPerPartition?: number;
  /** One fetch response at most; bounds the overshoot past the in-flight caps. @defaultValue 8 MiB */
  maxBytes?: number;
}

/**
 * Subscriber over a kafkajs consumer group. Offsets are never committed by kafkajs (autoCommit off, batches not
 * auto-resolved); `resolveOffset` is called for the records taken only to move the fetch position, so the next
 * fetch reads on from there (records not taken, because the consumer is at its caps, are fetched again). After a rebalance kafkajs fetches again from the committed offset; the caller drops what
 * it already has (records at or below its highest received offset).
 */
export class KafkaSubscriber implements Subscriber {
  readonly #options: KafkaSubscriberOptions;
  readonly #consumer: KafkaConsumer;
  readonly #admin: Admin;
  #adminConnected: Promise<void> | null = null;
  #closed: Promise<void> | null = null;
  #lagging: Promise<unknown> = Promise.resolve();
  #started = false;

  constructor(options: KafkaSubscriberOptions) {
    this.#options = options;
    const kafka = createKafka(options);
    this.#consumer = kafka.consumer({
      groupId: options.groupId,
      sessionTimeout: options.sessionTimeoutMs ?? 30_000,
      heartbeatInterval: options.heartbeatIntervalMs ?? 3000,
      maxBytesPerPartition: options.maxBytesPerPartition ?? 2 * 1024 * 1024 + 64 * 1024,
      maxBytes: options.maxBytes ?? 8 * 1024 * 1024,
      maxWaitTimeInMs: 250,
      allowAutoTopicCreation: false,
      retry: { retries: 10, initialRetryTime: 200, maxRetryTime: 5000 },
    });
    this.#admin = kafka.admin();
  }

  async start(sink: SubscriberSink): Promise<void> {
    this.#started = true;
    const consumer = this.#consumer;
    consumer.on(consumer.events.GROUP_JOIN, (event) => {
      const assignment = event.payload.memberAssignment as Record<string, number[]>;
      sink.onAssignment(Object.entries(assignment).flatMap(([topic, partitions]) => partitions.map((partition) => ({ topic, partition }))));
    });
    try {
      await consumer.connect();
      for (const topic of this.#options.topics) await consumer.subscribe({ topic, fromBeginning: this.#options.fromBeginning ?? true });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        partitionsConsumedConcurrently: 1,
        eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
          if (!isRunning() || isStale() || batch.messages.length === 0) return;
          const records: InboundRecord[] = batch.messages.map((m) => ({
            topic: batch.topic,
            partition: batch.partition,
            offset: m.offset,
            key: m.key === null || m.key === undefined ? null : m.key.toString('utf8'),
            // Copied: kafkajs values are slices of the whole fetch response, which would stay alive with them.
            value: m.value === null || m.value === undefined ? null : Buffer.from(m.value),
            headers: headersOf(m.headers),
          }));
          const taken = sink.onRecords(records);
          if (taken > 0) resolveOffset(batch.messages[taken - 1]!.offset);
          await heartbeat();
        },
      });
    } catch (cause) {
      throw classifyKafkaError(cause);
    }
  }

  async commit(offsets: Array<TopicPartition & { offset: string }>): Promise<void> {
    if (offsets.length === 0) return;
    try {
      await this.#consumer.commitOffsets(offsets.map((o) => ({ topic: o.topic, partition: o.partition, offset: o.offset })));
    } catch (cause) {
      throw classifyKafkaError(cause);
    }
  }

  pause(partitions: TopicPartition[]): void {
    for (const [topic, list] of byTopic(partitions)) this.#consumer.pause([{ topic, partitions: list }]);
  }

  resume(partitions: TopicPartition[]): void {
    for (const [topic, list] of byTopic(partitions)) this.#consumer.resume([{ topic, partitions: list }]);
  }

  lag(): Promise<PartitionLag[]> {
    if (this.#closed) return Promise.resolve([]);
    const running = this.#lag();
    this.#lagging = running.catch(() => undefined);
    return running;
  }

  async #lag(): Promise<PartitionLag[]> {
    this.#adminConnected ??= this.#admin.connect().catch((cause: unknown) => {
      this.#adminConnected = null;
      throw cause;
    });
    await this.#adminConnected;
    const out: PartitionLag[] = [];
    const committed = await this.#admin.fetchOffsets({ groupId: this.#options.groupId, topics: this.#options.topics });
    for (const { topic, partitions } of committed) {
      const high = new Map((await this.#admin.fetchTopicOffsets(topic)).map((p) => [p.partition, p.high]));
      for (const p of partitions) {
        const h = high.get(p.partition) ?? '0';
        const c = p.offset === '-1' ? null : p.offset;
        out.push({ topic, partition: p.partition, committed: c, high: h, lag: Math.max(0, Number(BigInt(h) - BigInt(c ?? '0'))) });
      }
    }
    return out;
  }

  close(): Promise<void> {
    this.#closed ??= (async () => {
      if (this.#started) await this.#consumer.disconnect().catch(() => {});
      // A lag query in flight would connect the admin after we looked: wait for it, then disconnect.
      await this.#lagging;
      if (this.#adminConnected) await this.#admin.disconnect().catch(() => {});
    })();
    return this.#closed;
  }
}

function byTopic(partitions: TopicPartition[]): Map<string, number[]> {
  const map = new Map<string, number[]>();
  for (const p of partitions) map.set(p.topic, [...(map.get(p.topic) ?? []), p.partition]);
  return map;
}
