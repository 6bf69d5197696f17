import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { BrokerError } from '../../errors.ts';
import type { PartitionAssignment } from '../../ports/partition-assignment.ts';
import type { PartitionLag, Subscriber, SubscriberSink, TopicPartition } from '../../ports/subscriber.ts';
import { connectNats, type NatsConnectionOptions } from './client.ts';
import { classifyNatsError } from './classify.ts';
import { durableName, takeOverDurable, type DurableSettings } from './consumers.ts';
import { PartitionReader } from './partition-reader.ts';
import { partitionPositions } from './positions.ts';
import { streamName } from './streams.ts';

export interface NatsSubscriberOptions extends NatsConnectionOptions {
  groupId: string;
  topics: string[];
  /** Who reads which partition: JetStream 2.9 has no exclusive consumer of its own (PartitionLeases). */
  assignment: PartitionAssignment;
  /** Where a group with no durable consumer yet starts. @defaultValue true */
  fromBeginning?: boolean;
  /** Messages delivered and not yet acknowledged per partition (the durable's max_ack_pending). @defaultValue 1000 */
  prefetch?: number;
  /** How long a delivered message may go unacknowledged before JetStream redelivers it. @defaultValue 30000 */
  ackWaitMs?: number;
  /** Told of a pull, a take-over or an ack-wait extension that failed (each is tried again). */
  onError?: (error: Error, partition: TopicPartition) => void;
}

const key = (p: TopicPartition) => `${p.topic}:${p.partition}`;

/**
 * Subscriber over NATS JetStream (docs/brokers.md). Each partition of a topic is a stream (`PB_<topic>_<p>`); a
 * consumer group is a durable pull consumer of that name on each of them, acknowledging with AckAll: acking
 * sequence s acknowledges all before it, so `commit` is the watermark commit Kafka's offsets give (offset =
 * stream sequence; committing offset n acknowledges sequence n − 1, confirmed by the server). Which member reads
 * which partition comes from `assignment` (PostgreSQL leases), so each partition has one reader and its events
 * arrive in order. Messages a member holds unacknowledged have their ack wait reset every third of it, so a slow
 * batch or a paused partition is not redelivered behind its back.
 */
export class NatsSubscriber implements Subscriber {
  readonly #options: NatsSubscriberOptions;
  readonly #settings: DurableSettings;
  readonly #readers = new Map<string, PartitionReader>();
  #client: { nc: NatsConnection; js: JetStreamClient; jsm: JetStreamManager } | null = null;
  #sink: SubscriberSink | null = null;
  #paused = new Set<string>();
  /** What the assignment says this member holds (a partition whose take-over failed is held and not read yet). */
  #held: TopicPartition[] = [];
  #extendTimer: NodeJS.Timeout | null = null;
  #assigning: Promise<void> = Promise.resolve();
  #closed: Promise<void> | null = null;

  constructor(options: NatsSubscriberOptions) {
    this.#options = options;
    this.#settings = {
      fromBeginning: options.fromBeginning ?? true,
      maxAckPending: options.prefetch ?? 1000,
      ackWaitMs: options.ackWaitMs ?? 30_000,
    };
  }

  async start(sink: SubscriberSink): Promise<void> {
    if (this.#sink) throw new Error('subscriber already started');
    this.#sink = sink;
    try {
      const nc = await connectNats({ ...this.#options, name: this.#options.name ?? 'postbox-consumer' });
      this.#client = { nc, js: jetstream(nc), jsm: await jetstreamManager(nc) };
      const partitions = await this.#partitions(this.#client.jsm);
      await this.#options.assignment.join(partitions, (held) => {
        this.#assigning = this.#assigning.then(() => this.#assign(held));
      });
    } catch (cause) {
      throw cause instanceof BrokerError ? cause : classifyNatsError(cause);
    }
    this.#extendTimer = setInterval(() => {
      for (const reader of this.#readers.values()) reader.extend();
      // A held partition whose take-over failed (the server briefly away) is tried again.
      if (this.#held.some((p) => !this.#readers.has(key(p))))
        this.#assigning = this.#assigning.then(() => this.#assign(this.#held));
    }, this.#settings.ackWaitMs / 3);
  }

  /** Every partition of the topics: their streams on the server, which the relay (ensureStreams) made. */
  async #partitions(jsm: JetStreamManager): Promise<TopicPartition[]> {
    const out: TopicPartition[] = [];
    for (const topic of this.#options.topics) {
      let count = 0;
      for await (const name of jsm.streams.names(`${topic}.*`)) if (name) count++;
      if (count === 0)
        throw new BrokerError('nats_no_stream', 'transient', `no stream carries topic ${topic} (${topic}.<p>)`);
      for (let partition = 0; partition < count; partition++) {
        await jsm.streams.info(streamName(topic, partition)).catch((cause: unknown) => {
          throw new BrokerError('nats_no_stream', 'transient', `stream ${streamName(topic, partition)} is missing`, {
            cause,
          });
        });
        out.push({ topic, partition });
      }
    }
    return out;
  }

  /** Stops reading what was lost, tells the sink, then takes over and reads what was gained. */
  async #assign(held: TopicPartition[]): Promise<void> {
    if (this.#closed || !this.#client) return;
    this.#held = held;
    const next = new Set(held.map(key));
    const lost = [...this.#readers.entries()].filter(([k]) => !next.has(k));
    for (const [k] of lost) this.#readers.delete(k);
    for (const k of this.#paused) if (!next.has(k)) this.#paused.delete(k);
    await Promise.all(lost.map(([, reader]) => reader.stop()));
    if (lost.length > 0 || held.some((p) => !this.#readers.has(key(p)))) this.#sink!.onAssignment(held);
    for (const p of held) {
      if (this.#readers.has(key(p))) continue;
      await this.#read(p);
    }
  }

  async #read(p: TopicPartition): Promise<void> {
    const { js, jsm } = this.#client!;
    const stream = streamName(p.topic, p.partition);
    const durable = durableName(this.#options.groupId);
    try {
      await takeOverDurable(jsm, stream, durable, this.#settings);
      const consumer = await js.consumers.get(stream, durable);
      const reader = new PartitionReader(consumer, {
        topic: p.topic,
        partition: p.partition,
        maxAckPending: this.#settings.maxAckPending,
        offer: (records) => this.#sink!.onRecords(records),
        onError: (error) => this.#options.onError?.(classifyNatsError(error), p),
      });
      if (this.#paused.has(key(p))) reader.pause();
      this.#readers.set(key(p), reader);
    } catch (cause) {
      // Tried again every third of the ack wait; until then the partition is held and not read (its lag shows).
      this.#options.onError?.(classifyNatsError(cause), p);
    }
  }

  async commit(offsets: Array<TopicPartition & { offset: string }>): Promise<void> {
    try {
      await Promise.all(
        offsets.map((o) => this.#readers.get(key(o))?.commit(Number(BigInt(o.offset) - 1n)) ?? Promise.resolve()),
      );
    } catch (cause) {
      throw cause instanceof BrokerError ? cause : classifyNatsError(cause);
    }
  }

  pause(partitions: TopicPartition[]): void {
    for (const p of partitions) {
      this.#paused.add(key(p));
      this.#readers.get(key(p))?.pause();
    }
  }

  resume(partitions: TopicPartition[]): void {
    for (const p of partitions) {
      this.#paused.delete(key(p));
      this.#readers.get(key(p))?.resume();
    }
  }

  /**
   * Per partition of the topics: committed = ack floor + 1 (the next sequence the group reads), high = the
   * stream's last sequence + 1, lag = messages not yet acknowledged by the group (positions.ts).
   */
  async lag(): Promise<PartitionLag[]> {
    if (this.#closed || !this.#client) return [];
    const positions = await partitionPositions(this.#client.jsm, this.#options.groupId, this.#options.topics);
    return positions.map(({ unacknowledged, ...p }) => ({ ...p, lag: unacknowledged }));
  }

  close(): Promise<void> {
    this.#closed ??= (async () => {
      if (this.#extendTimer) clearInterval(this.#extendTimer);
      await this.#assigning;
      await Promise.all([...this.#readers.values()].map((r) => r.stop()));
      this.#readers.clear();
      if (this.#sink) await this.#options.assignment.leave().catch(() => {});
      await this.#client?.nc.drain().catch(() => this.#client?.nc.close());
    })();
    return this.#closed;
  }
}
