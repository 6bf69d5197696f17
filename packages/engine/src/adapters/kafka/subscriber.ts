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
import { Backpressure } from './backpressure.ts';
import { fromKafkaHeaders } from './headers.ts';
import {
  checkSubscriberTimings,
  DEFAULT_HEARTBEAT_INTERVAL_MS,
  DEFAULT_SESSION_TIMEOUT_MS,
} from './subscriber-options.ts';

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
  /**
   * One fetch response at most; bounds the overshoot past the in-flight caps, and what a pause throws away (a
   * fetch answered while partitions are paused is decoded, then dropped by kafkajs). Kafka still returns a record
   * batch larger than this when it comes first (KIP-74). @defaultValue 2.5 MiB (the consumer bench: with 8 MiB
   * the consumer's process spent a few µs more CPU per event, 63–66 against 56–61 µs, at the same 50 ms wait)
   */
  maxBytes?: number;
  /**
   * How long the broker holds a fetch open waiting for records, and how long kafkajs sleeps when every partition
   * is paused before it looks again. A consumer resuming at half its cap waits out that sleep with its queues
   * running dry: 250 ms leaves the machine 31–35 % idle in the consumer bench, 50 ms 10–16 % (+25 % events/s). An
   * idle consumer sends a fetch per wait: 47 ms of CPU a second at 50 ms, 39 at 250 (12 partitions, measured).
   * At least 10 (MIN_MAX_WAIT_MS). @defaultValue 50
   */
  maxWaitMs?: number;
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
const DEFAULT_FETCH_BYTES = 2.5 * 1024 * 1024;
const DEFAULT_MAX_WAIT_MS = 50;

/**
 * Subscriber over a kafkajs consumer group. Offsets are never committed by kafkajs (autoCommit off, batches not
 * auto-resolved); `resolveOffset` only moves the fetch position. Pause and resume hold the rest of a batch the sink
 * did not take, so resuming costs no fetch (backpressure.ts).
 *
 * After a rebalance (or a member replaced) kafkajs fetches again from the committed offsets: held records are
 * dropped then, and the sink drops what it already has (records at or below its highest received offset).
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
  readonly #backpressure = new Backpressure(
    () => this.#consumer,
    (topic, partition, messages) => this.#offer(topic, partition, messages),
  );

  /** @throws ConfigError for a size or timing that is not a whole number in range (subscriber-options.ts). */
  constructor(options: KafkaSubscriberOptions) {
    checkSubscriberTimings(options);
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
      sessionTimeout: this.#options.sessionTimeoutMs ?? DEFAULT_SESSION_TIMEOUT_MS,
      heartbeatInterval: this.#options.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS,
      maxBytesPerPartition: this.#options.maxBytesPerPartition ?? 2 * 1024 * 1024 + 64 * 1024,
      maxBytes: this.#options.maxBytes ?? DEFAULT_FETCH_BYTES,
      maxWaitTimeInMs: this.#options.maxWaitMs ?? DEFAULT_MAX_WAIT_MS,
      allowAutoTopicCreation: false,
      retry: { retries: 10, initialRetryTime: 200, maxRetryTime: 5000 },
    });
    consumer.on(consumer.events.GROUP_JOIN, (event) => {
      if (consumer !== this.#consumer) return;
      this.#replaceDelayMs = REPLACE_MIN_MS;
      const assignment = event.payload.memberAssignment as Record<string, number[]>;
      const assigned = Object.entries(assignment).flatMap(([topic, partitions]) =>
        partitions.map((partition) => ({ topic, partition })),
      );
      this.#backpressure.dropHeld(assigned);
      this.#sink?.onAssignment(assigned);
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
          // Fetched before the pause took effect: left unresolved, fetched again once the partition resumes.
          if (this.#backpressure.turnsAway(batch.topic, batch.partition)) return;
          const taken = this.#offer(batch.topic, batch.partition, batch.messages);
          if (taken < batch.messages.length && this.#sink)
            this.#backpressure.hold(batch.topic, batch.partition, batch.messages.slice(taken));
          resolveOffset(batch.messages[batch.messages.length - 1]!.offset);
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
          headers: fromKafkaHeaders(m.headers),
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
    this.#backpressure.dropHeld([]);
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

  /** Stops handing the partitions' records over until resume(); see Backpressure. */
  pause(partitions: TopicPartition[]): void {
    this.#backpressure.pause(partitions);
  }

  /** Held records first, then fetching again; see Backpressure. */
  resume(partitions: TopicPartition[]): void {
    this.#backpressure.resume(partitions);
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
