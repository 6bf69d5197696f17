import type { AMQPChannel, AMQPMessage } from '@cloudamqp/amqp-client';
import type { InboundRecord, TopicPartition } from '../../ports/subscriber.ts';
import type { PartitionReading } from '../leased-readers.ts';
import { closeChannel } from './connection.ts';
import { toInboundRecord } from './inbound.ts';

export interface QueueReaderOptions {
  topic: string;
  partition: number;
  queue: string;
  /** Deliveries unacknowledged at most on the channel (basic.qos): what bounds what is held here. */
  prefetch: number;
  paused: boolean;
  /** The next offset to give a delivery (a count per partition kept by the subscriber across channels). */
  nextOffset: () => bigint;
  /** The sink's `onRecords`: takes a prefix of the records. */
  offer: (records: InboundRecord[]) => number;
}

/** Records handed to the sink at a time. */
const OFFER_CHUNK = 100;

/** What the reader holds of one delivery until it is acknowledged. */
interface Delivery {
  offset: bigint;
  tag: number;
  /** When it arrived (ms since the epoch). */
  at: number;
}

/**
 * Reads one partition's quorum queue on a channel of its own, for the member holding its lease (RabbitMQ has no
 * offsets: each delivery is given the next number of its partition's count, and `commit` acknowledges, with one
 * multiple-ack, every delivery below an offset). Deliveries arrive pushed, bounded by the channel's prefetch;
 * what the sink does not take (it is at its caps, or paused the partition) is held here and offered again on
 * `resume` — the broker sends nothing more once `prefetch` are unacknowledged, so that is the bound.
 *
 * Stopping closes the channel: RabbitMQ puts every delivery it had not been told was acknowledged back at the
 * head of the queue, for the next holder. The channel closed by the broker (the connection lost, the queue
 * deleted, its consumer timeout) ends the reader: `ended` resolves with the reason.
 */
export class QueueReader implements PartitionReading {
  readonly #options: QueueReaderOptions;
  readonly #channel: AMQPChannel;
  readonly #unacked: Delivery[] = [];
  #held: AMQPMessage[] = [];
  #heldOffsets: bigint[] = [];
  #paused: boolean;
  #stopped = false;
  #offerScheduled = false;
  #lastCommitted: bigint | null = null;
  /** Resolves when the channel is gone: null when this reader stopped it, the broker's reason otherwise. */
  readonly ended: Promise<Error | null>;
  #end!: (reason: Error | null) => void;

  private constructor(channel: AMQPChannel, options: QueueReaderOptions) {
    this.#channel = channel;
    this.#options = options;
    this.#paused = options.paused;
    this.ended = new Promise((resolve) => (this.#end = resolve));
  }

  /** Opens the reader on a fresh channel (closed again when consuming cannot start). */
  static async open(channel: AMQPChannel, options: QueueReaderOptions): Promise<QueueReader> {
    const reader = new QueueReader(channel, options);
    try {
      await channel.basicQos(options.prefetch);
      const consumer = await channel.basicConsume(options.queue, { noAck: false }, (m) => reader.#receive(m));
      // Closed in the same read as the consume-ok: the client registered the consumer on a dead channel, whose
      // wait() would never settle.
      if (channel.closed || channel.connection.closed) throw new Error('channel closed as consuming started');
      consumer.wait().then(
        () => reader.#end(null),
        (reason: unknown) => reader.#end(reason as Error),
      );
    } catch (cause) {
      await closeChannel(channel);
      throw cause;
    }
    return reader;
  }

  get partition(): TopicPartition {
    return { topic: this.#options.topic, partition: this.#options.partition };
  }

  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    this.#paused = false;
    this.#offerHeld();
  }

  /** Closes the channel: what it held unacknowledged goes back to the queue. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#held = [];
    this.#heldOffsets = [];
    await closeChannel(this.#channel);
    this.#end(null);
  }

  /**
   * Acknowledges every delivery below `offset` (one multiple-ack). AMQP does not confirm an ack: it resolves once
   * written, and one lost with the connection means those deliveries come again (the inbox absorbs them).
   */
  async commit(offset: bigint): Promise<void> {
    let last = -1;
    for (let i = 0; i < this.#unacked.length && this.#unacked[i]!.offset < offset; i++) last = i;
    if (last < 0) return;
    // Taken off before the ack is written, so a commit that overlaps this one acks only what follows; an ack that
    // fails means the channel is gone, and with it every delivery it held (they come again).
    const { tag } = this.#unacked[last]!;
    this.#unacked.splice(0, last + 1);
    this.#lastCommitted = offset;
    await this.#channel.basicAck(tag, true);
  }

  /** Its channel is gone though it was not stopped (a close the client never reported): it must be replaced. */
  get dead(): boolean {
    return !this.#stopped && this.#channel.closed;
  }

  /** How long the oldest delivery has been held unacknowledged, in ms (0 when none is). */
  heldForMs(now = Date.now()): number {
    const oldest = this.#unacked[0];
    return oldest === undefined ? 0 : now - oldest.at;
  }

  /** Deliveries not acknowledged, and the last offset committed (next to read), for lag. */
  progress(): { unacked: number; committed: bigint | null } {
    return { unacked: this.#unacked.length, committed: this.#lastCommitted };
  }

  #receive(m: AMQPMessage): void {
    if (this.#stopped) return;
    const offset = this.#options.nextOffset();
    this.#unacked.push({ offset, tag: m.deliveryTag, at: Date.now() });
    this.#held.push(m);
    this.#heldOffsets.push(offset);
    if (this.#offerScheduled) return;
    this.#offerScheduled = true;
    setImmediate(() => {
      this.#offerScheduled = false;
      this.#offerHeld();
    });
  }

  #offerHeld(): void {
    const { topic, partition } = this.#options;
    while (!this.#paused && !this.#stopped && this.#held.length > 0) {
      const chunk = this.#held
        .slice(0, OFFER_CHUNK)
        .map((m, i) => toInboundRecord(topic, partition, this.#heldOffsets[i]!, m));
      const taken = this.#options.offer(chunk);
      this.#held.splice(0, taken);
      this.#heldOffsets.splice(0, taken);
      if (taken < chunk.length) break;
    }
  }
}
