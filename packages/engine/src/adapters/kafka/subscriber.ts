import type { Admin, Kafka, Consumer as KafkaConsumer, KafkaMessage } from 'kafkajs';
import { classifyKafkaError } from './classify.ts';
import { createKafka, type KafkaConnection } from './client.ts';
import type {
  InboundRecord,
  PartitionLag,
  Subscriber,
  SubscriberSink,
  TopicPartition,
} from '../../ports/subscriber.ts';
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
  /**
   * Told of every crash of the kafkajs member. `replaced` is true when kafkajs gave up on it (a crash it does
   * not restart from) and the subscriber replaces it with a new member after `retryInMs`.
   */
  onCrash?: (crash: SubscriberCrash) => void;
}

export interface SubscriberCrash {
  error: Error;
  /** kafkajs restarts the member itself. */
  restart: boolean;
  /** The subscriber replaces the member (kafkajs would not). */
  replaced: boolean;
  retryInMs: number;
}

const REPLACE_MIN_MS = 500;
/** Records handed to the sink at a time. */
const OFFER_CHUNK = 100;
const REPLACE_MAX_MS = 30_000;

/**
 * Subscriber over a kafkajs consumer group. Offsets are never committed by kafkajs (autoCommit off, batches not
 * auto-resolved); `resolveOffset` is called for the records taken only to move the fetch position, so the next
 * fetch reads on from there (records not taken, because the consumer is at its caps, are fetched again). After a rebalance kafkajs fetches again from the committed offset; the caller drops what
 * it already has (records at or below its highest received offset).
 */
export class KafkaSubscriber implements Subscriber {
  readonly #options: KafkaSubscriberOptions;
  readonly #kafka: Kafka;
  readonly #admin: Admin;
  #consumer: KafkaConsumer;
  #sink: SubscriberSink | null = null;
  #adminConnected: Promise<void> | null = null;
  #closed: Promise<void> | null = null;
  #lagging: Promise<unknown> = Promise.resolve();
  #replaceTimer: NodeJS.Timeout | null = null;
  #replacing: Promise<void> = Promise.resolve();
  #replaceDelayMs = REPLACE_MIN_MS;

  constructor(options: KafkaSubscriberOptions) {
    this.#options = options;
    this.#kafka = createKafka(options);
    this.#consumer = this.#member();
    this.#admin = this.#kafka.admin();
  }

  async start(sink: SubscriberSink): Promise<void> {
    if (this.#sink) throw new Error('subscriber already started');
    this.#sink = sink;
    await this.#run(this.#consumer);
  }

  /** A kafkajs consumer (one group member) wired to this subscriber. */
  #member(): KafkaConsumer {
    const consumer = this.#kafka.consumer({
      groupId: this.#options.groupId,
      sessionTimeout: this.#options.sessionTimeoutMs ?? 30_000,
      heartbeatInterval: this.#options.heartbeatIntervalMs ?? 3000,
      maxBytesPerPartition: this.#options.maxBytesPerPartition ?? 2 * 1024 * 1024 + 64 * 1024,
      maxBytes: this.#options.maxBytes ?? 8 * 1024 * 1024,
      maxWaitTimeInMs: 250,
      allowAutoTopicCreation: false,
      retry: { retries: 10, initialRetryTime: 200, maxRetryTime: 5000 },
    });
    consumer.on(consumer.events.GROUP_JOIN, (event) => {
      if (consumer !== this.#consumer) return;
      this.#replaceDelayMs = REPLACE_MIN_MS;
      const assignment = event.payload.memberAssignment as Record<string, number[]>;
      this.#sink?.onAssignment(
        Object.entries(assignment).flatMap(([topic, partitions]) =>
          partitions.map((partition) => ({ topic, partition })),
        ),
      );
    });
    consumer.on(consumer.events.CRASH, (event) => {
      if (consumer !== this.#consumer || this.#closed) return;
      const { error, restart } = event.payload;
      // kafkajs does not restart after a crash it deems non-retriable (a join refused, an unexpected error): the
      // member is gone while the process lives on. Nothing would consume again, so a new member takes over.
      const replaced = !restart;
      this.#options.onCrash?.({ error, restart, replaced, retryInMs: replaced ? this.#replaceDelayMs : 0 });
      if (replaced) this.#replaceLater();
    });
    return consumer;
  }

  async #run(consumer: KafkaConsumer): Promise<void> {
    try {
      await consumer.connect();
      for (const topic of this.#options.topics)
        await consumer.subscribe({ topic, fromBeginning: this.#options.fromBeginning ?? true });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        partitionsConsumedConcurrently: 1,
        eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
          if (!isRunning() || isStale() || batch.messages.length === 0 || consumer !== this.#consumer) return;
          const taken = this.#offer(batch.topic, batch.partition, batch.messages);
          if (taken > 0) resolveOffset(batch.messages[taken - 1]!.offset);
          await heartbeat();
        },
      });
    } catch (cause) {
      throw classifyKafkaError(cause);
    }
  }

  /**
   * Hands a fetched batch over in chunks and stops at the first chunk not taken whole: at its caps the consumer
   * takes none of the rest, so those records are never copied or decoded (a fetch holds thousands of them).
   */
  #offer(topic: string, partition: number, messages: KafkaMessage[]): number {
    let taken = 0;
    for (let at = 0; at < messages.length; at += OFFER_CHUNK) {
      const chunk = messages.slice(at, at + OFFER_CHUNK).map(
        (m): InboundRecord => ({
          topic,
          partition,
          offset: m.offset,
          key: m.key === null || m.key === undefined ? null : m.key.toString('utf8'),
          // Copied: kafkajs values are slices of the whole fetch response, which would stay alive with them.
          value: m.value === null || m.value === undefined ? null : Buffer.from(m.value),
          headers: headersOf(m.headers),
        }),
      );
      const took = this.#sink!.onRecords(chunk);
      taken += took;
      if (took < chunk.length) break;
    }
    return taken;
  }

  /** The member left the group (everything it had is revoked); a new one joins after a growing pause. */
  #replaceLater(): void {
    if (this.#replaceTimer || this.#closed) return;
    this.#sink?.onAssignment([]);
    const delay = this.#replaceDelayMs;
    this.#replaceDelayMs = Math.min(REPLACE_MAX_MS, delay * 2);
    const old = this.#consumer;
    this.#replaceTimer = setTimeout(() => {
      this.#replaceTimer = null;
      this.#replacing = (async () => {
        await old.disconnect().catch(() => {});
        if (this.#closed) return;
        const next = this.#member();
        this.#consumer = next;
        try {
          await this.#run(next);
        } catch (cause) {
          // connect or subscribe failed: no CRASH event comes for that, so report it and go round again.
          this.#options.onCrash?.({
            error: cause as Error,
            restart: false,
            replaced: true,
            retryInMs: this.#replaceDelayMs,
          });
          this.#replaceLater();
        }
      })();
    }, delay);
  }

  async commit(offsets: Array<TopicPartition & { offset: string }>): Promise<void> {
    if (offsets.length === 0) return;
    try {
      await this.#consumer.commitOffsets(
        offsets.map((o) => ({ topic: o.topic, partition: o.partition, offset: o.offset })),
      );
    } catch (cause) {
      throw classifyKafkaError(cause);
    }
  }

  // Between a crash and the member's restart kafkajs has no group to pause and throws; nothing is fetched then,
  // and the caller pauses again on the next assignment.
  pause(partitions: TopicPartition[]): void {
    for (const [topic, list] of byTopic(partitions))
      ignoreNotRunning(() => this.#consumer.pause([{ topic, partitions: list }]));
  }

  resume(partitions: TopicPartition[]): void {
    for (const [topic, list] of byTopic(partitions))
      ignoreNotRunning(() => this.#consumer.resume([{ topic, partitions: list }]));
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
        out.push({
          topic,
          partition: p.partition,
          committed: c,
          high: h,
          lag: Math.max(0, Number(BigInt(h) - BigInt(c ?? '0'))),
        });
      }
    }
    return out;
  }

  close(): Promise<void> {
    this.#closed ??= (async () => {
      if (this.#replaceTimer) clearTimeout(this.#replaceTimer);
      await this.#replacing;
      if (this.#sink) await this.#consumer.disconnect().catch(() => {});
      // A lag query in flight would connect the admin after we looked: wait for it, then disconnect.
      await this.#lagging;
      if (this.#adminConnected) await this.#admin.disconnect().catch(() => {});
    })();
    return this.#closed;
  }
}

function ignoreNotRunning(call: () => void): void {
  try {
    call();
  } catch (cause) {
    if (!/not initialized|consumer#run must be called/i.test((cause as Error).message)) throw cause;
  }
}

function byTopic(partitions: TopicPartition[]): Map<string, number[]> {
  const map = new Map<string, number[]>();
  for (const p of partitions) map.set(p.topic, [...(map.get(p.topic) ?? []), p.partition]);
  return map;
}
