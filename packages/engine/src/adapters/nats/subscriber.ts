import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { BrokerError } from '../../errors.ts';
import type { PartitionAssignment } from '../../ports/partition-assignment.ts';
import type { PartitionLag, Subscriber, SubscriberSink, TopicPartition } from '../../ports/subscriber.ts';
import { connectNats, type NatsConnectionOptions } from './client.ts';
import { classifyNatsError } from './classify.ts';
import { takeOverDurable, type DurableSettings } from './consumers.ts';
import { LeasedReaders } from '../leased-readers.ts';
import { PartitionReader, type ReaderEnd } from './partition-reader.ts';
import { partitionPositions } from './positions.ts';
import { partitionStreams, streamName } from './streams.ts';

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
  /** Told of a pull, a take-over, an acknowledgement or a delivery gap that failed (each is tried again). */
  onError?: (error: Error, partition: TopicPartition) => void;
}

const ACK = new TextEncoder().encode('+ACK');
const WORKING = new TextEncoder().encode('+WPI');
const ACK_TIMEOUT_MS = 5000;

/**
 * Subscriber over NATS JetStream (docs/brokers.md). Each partition of a topic is a stream (`PB_<topic>_<p>`); a
 * consumer group reads it through a durable pull consumer (`<group>__<epoch>`, consumers.ts) acknowledging with
 * AckAll: acking sequence s acknowledges all before it, so `commit` is the watermark commit Kafka's offsets give
 * (offset = stream sequence; committing offset n acknowledges sequence n − 1, confirmed by the server). Which
 * member reads which partition comes from `assignment` (PostgreSQL leases): a member stops reading a partition
 * before it gives the lease back, and takes a partition over with a fresh durable from the ack floor, so each
 * partition has one reader and its events arrive in order. Messages a member holds unacknowledged have their ack
 * wait reset every third of it, so a slow batch or a paused partition is not redelivered behind its back.
 */
export class NatsSubscriber implements Subscriber {
  readonly #options: NatsSubscriberOptions;
  readonly #settings: DurableSettings;
  readonly #readers: LeasedReaders<PartitionReader>;
  /** Set as soon as connected, so close() closes it even when what follows in start() fails. */
  #nc: NatsConnection | null = null;
  #client: { js: JetStreamClient; jsm: JetStreamManager } | null = null;
  #sink: SubscriberSink | null = null;
  #extendTimer: NodeJS.Timeout | null = null;
  #closed: Promise<void> | null = null;

  constructor(options: NatsSubscriberOptions) {
    this.#options = options;
    this.#settings = {
      fromBeginning: options.fromBeginning ?? true,
      maxAckPending: options.prefetch ?? 1000,
      ackWaitMs: options.ackWaitMs ?? 30_000,
    };
    this.#readers = new LeasedReaders({
      open: (p, paused, stillHeld) => this.#read(p, paused, stillHeld),
      onAssignment: (held) => this.#sink?.onAssignment(held),
      // Tried again every third of the ack wait; until then the partition is held and not read (its lag shows).
      onError: (cause, p) => this.#report(classifyNatsError(cause), p),
    });
  }

  async start(sink: SubscriberSink): Promise<void> {
    if (this.#sink) throw new Error('subscriber already started');
    this.#sink = sink;
    try {
      const nc = await connectNats({ ...this.#options, name: this.#options.name ?? 'postbox-consumer' });
      this.#nc = nc;
      this.#client = { js: jetstream(nc), jsm: await jetstreamManager(nc) };
      const partitions = await this.#partitions(this.#client.jsm);
      await this.#options.assignment.join(partitions, (held) =>
        this.#closed ? Promise.resolve() : this.#readers.assign(held),
      );
    } catch (cause) {
      throw cause instanceof BrokerError ? cause : classifyNatsError(cause);
    }
    // Closed while starting: no timer, or the process would never exit.
    if (this.#closed) return;
    this.#extendTimer = setInterval(() => {
      for (const reader of this.#readers.all()) reader.extend();
      // A held partition whose take-over failed (the server briefly away) is tried again.
      this.#readers.readMissing();
    }, this.#settings.ackWaitMs / 3);
  }

  /** Every partition of the topics: their streams on the server, which the relay (ensureStreams) made. */
  async #partitions(jsm: JetStreamManager): Promise<TopicPartition[]> {
    const out: TopicPartition[] = [];
    for (const topic of this.#options.topics) {
      const streams = await partitionStreams(jsm, topic);
      if (streams.length === 0 || streams.some((s, i) => s.partition !== i))
        throw new BrokerError(
          'nats_no_stream',
          'transient',
          `topic ${topic} has no complete set of partition streams (${streamName(topic, 0)} …): found ${streams.map((s) => s.name).join(', ') || 'none'}`,
        );
      out.push(...streams.map((s) => ({ topic, partition: s.partition })));
    }
    return out;
  }

  /** Takes a held partition over with a fresh durable from the ack floor, and reads it. */
  async #read(p: TopicPartition, paused: boolean, stillHeld: () => boolean): Promise<PartitionReader | null> {
    const { js, jsm } = this.#client!;
    const nc = this.#nc!;
    const stream = streamName(p.topic, p.partition);
    const durable = await takeOverDurable(jsm, stream, this.#options.groupId, this.#settings);
    const consumer = await js.consumers.get(stream, durable.name);
    // Lost while taking over: a reader would start pulling from the next holder's durable at once.
    if (!stillHeld()) return null;
    const reader = new PartitionReader(consumer, {
      topic: p.topic,
      partition: p.partition,
      startSeq: durable.startSeq,
      paused,
      maxAckPending: this.#settings.maxAckPending,
      offer: (records) => this.#sink!.onRecords(records),
      ack: async (reply) => {
        await nc.request(reply, ACK, { timeout: ACK_TIMEOUT_MS });
      },
      progress: (reply) => nc.publish(reply, WORKING),
      heldInStream: (from, to) => heldInStream(jsm, stream, from, to),
      onError: (error) => this.#report(classifyNatsError(error), p),
    });
    void reader.done.then((end) => this.#ended(p, reader, end));
    return reader;
  }

  /** A reader that ended at a delivery gap is replaced: its partition is read again from the ack floor. */
  #ended(p: TopicPartition, reader: PartitionReader, end: ReaderEnd): void {
    if (end !== 'gap' || this.#readers.get(p) !== reader) return;
    this.#report(
      new BrokerError('nats_delivery_gap', 'transient', `a delivery skipped a message the stream holds: read again`),
      p,
    );
    this.#readers.ended(p, reader);
  }

  #report(error: Error, p: TopicPartition): void {
    this.#options.onError?.(error, p);
  }

  async commit(offsets: Array<TopicPartition & { offset: string }>): Promise<void> {
    try {
      await Promise.all(
        offsets.map((o) => this.#readers.get(o)?.commit(Number(BigInt(o.offset) - 1n)) ?? Promise.resolve()),
      );
    } catch (cause) {
      throw cause instanceof BrokerError ? cause : classifyNatsError(cause);
    }
  }

  pause(partitions: TopicPartition[]): void {
    this.#readers.pause(partitions);
  }

  resume(partitions: TopicPartition[]): void {
    this.#readers.resume(partitions);
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
      await this.#readers.close();
      if (this.#sink) await this.#options.assignment.leave().catch(() => {});
      const nc = this.#nc;
      await nc?.drain().catch(() => nc.close());
    })();
    return this.#closed;
  }
}

/** Whether the stream still holds any sequence in [from, to): not expired by its limits, not deleted. */
async function heldInStream(jsm: JetStreamManager, stream: string, from: number, to: number): Promise<boolean> {
  const { state } = await jsm.streams.info(stream, { deleted_details: true });
  const start = Math.max(from, state.first_seq);
  const end = Math.min(to, state.last_seq + 1);
  if (start >= end) return false;
  const deleted = (state.deleted ?? []).filter((seq) => seq >= start && seq < end).length;
  return end - start > deleted;
}
