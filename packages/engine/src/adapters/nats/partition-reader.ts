import type { Consumer as JsConsumer, ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import type { InboundRecord } from '../../ports/subscriber.ts';
import { toInboundRecord } from './inbound.ts';

/** What a reader needs from its subscriber besides the durable to pull from. */
export interface PartitionReaderOptions {
  topic: string;
  partition: number;
  /** The stream sequence the durable delivers first. */
  startSeq: number;
  /** Starts paused (the sink paused the partition before this member read it). */
  paused: boolean;
  /** The sink's `onRecords`: takes a prefix of the records. */
  offer: (records: InboundRecord[]) => number;
  /** Acknowledges up to a message (AckAll) through its reply subject, confirmed by the server. */
  ack: (reply: string) => Promise<void>;
  /** Resets a message's ack wait through its reply subject. */
  progress: (reply: string) => void;
  /** Whether the stream still holds any sequence in [from, to) (a gap over deleted messages is no loss). */
  heldInStream: (from: number, to: number) => Promise<boolean>;
  /** Messages delivered and not yet acknowledged, at most: the durable's max_ack_pending. */
  maxAckPending: number;
  /** Told of a pull that failed; the reader pulls again after a pause. */
  onError: (error: Error) => void;
}

/** How a reader ended: stopped, or at a delivery gap (it must be read again from the ack floor). */
export type ReaderEnd = 'stopped' | 'gap';

/** Records handed to the sink at a time. */
const OFFER_CHUNK = 100;
/**
 * One pull at most, in bytes, estimated from the sizes seen so far: nats.js bounds a pull by messages or by bytes,
 * not both, and a pull bounded by bytes that fills its message count first is only ended by its expiry (2.9
 * signals no completion), so the bound is a message count sized to stay near these bytes.
 */
const PULL_BYTES = 2 * 1024 * 1024;
const PULL_MESSAGES_MAX = 256;
/** What the CloudEvents headers of a message add, about (not measured per message: that would cost a copy). */
const HEADER_BYTES = 400;
/** How long one pull waits on the server (nats.js' minimum is 1 s; its heartbeats end a pull the server lost). */
const PULL_EXPIRES_MS = 5000;
const RETRY_PAUSE_MS = 1000;

/**
 * Reads one partition stream through its group's durable pull consumer, for the member holding its lease.
 *
 * Pulls bounded batches and offers each message to the sink as it arrives (messages of one socket read together).
 * What the sink does not take (it is at its caps) is held here — one pull at most, about 2 MiB — and offered again on
 * `resume`; no new pull starts while anything is held or the sink has paused the partition. Messages delivered
 * and not acknowledged are kept by sequence (their reply subjects only), for the watermark acknowledgement
 * (`commit`) and to reset their ack wait (`extend`), so none is redelivered while this member holds it.
 *
 * Sequences are dense in a partition stream: a delivery that skips one (a message lost in transit, or dropped by
 * a pull the client gave up on) would let a later AckAll acknowledge the skipped one unread. The reader checks
 * the stream: a sequence the stream no longer holds is no loss and reading goes on; otherwise the reader ends
 * with 'gap' and its subscriber reads the partition again from the ack floor.
 */
export class PartitionReader {
  readonly #options: PartitionReaderOptions;
  readonly #consumer: JsConsumer;
  /** Sequence → reply subject of each message delivered and not yet acknowledged. */
  readonly #unacked = new Map<number, string>();
  #held: JsMsg[] = [];
  #expected: number;
  #paused: boolean;
  #stopped = false;
  #end: ReaderEnd = 'stopped';
  /** Messages that arrived while a gap is being checked. */
  #checking: JsMsg[] | null = null;
  #pull: ConsumerMessages | null = null;
  #wake: (() => void) | null = null;
  #offerScheduled = false;
  /** Running mean of message sizes (payload and headers), for the pull size. */
  #meanBytes = 1024;
  readonly done: Promise<ReaderEnd>;

  constructor(consumer: JsConsumer, options: PartitionReaderOptions) {
    this.#consumer = consumer;
    this.#options = options;
    this.#expected = options.startSeq;
    this.#paused = options.paused;
    this.done = this.#run().then(() => this.#end);
  }

  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    this.#paused = false;
    this.#offerHeld();
    this.#wakeUp();
  }

  /** Stops pulling at once; what is held is dropped (the next holder reads it again from the ack floor). */
  stop(): Promise<ReaderEnd> {
    this.#halt('stopped');
    return this.done;
  }

  /** Acknowledges every message up to `sequence` (AckAll), confirmed by the server. */
  async commit(sequence: number): Promise<void> {
    let reply: string | undefined;
    let last = 0;
    for (const [seq, r] of this.#unacked) if (seq <= sequence && seq > last) [reply, last] = [r, seq];
    if (reply === undefined) return;
    await this.#options.ack(reply);
    for (const seq of this.#unacked.keys()) if (seq <= last) this.#unacked.delete(seq);
    this.#wakeUp();
  }

  /** Resets the ack wait of every message this member holds unacknowledged. */
  extend(): void {
    for (const reply of this.#unacked.values()) this.#options.progress(reply);
  }

  #halt(end: ReaderEnd): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#end = end;
    this.#held = [];
    this.#pull?.stop();
    this.#wakeUp();
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      const full = this.#unacked.size >= this.#options.maxAckPending;
      if (this.#paused || this.#held.length > 0 || this.#checking || full) {
        await new Promise<void>((resolve) => (this.#wake = resolve));
        continue;
      }
      try {
        this.#pull = await this.#consumer.fetch({ max_messages: this.#pullSize(), expires: PULL_EXPIRES_MS });
        for await (const m of this.#pull) this.#receive(m);
      } catch (cause) {
        if (this.#stopped) break;
        this.#options.onError(cause as Error);
        await new Promise((resolve) => setTimeout(resolve, RETRY_PAUSE_MS));
      } finally {
        this.#pull = null;
      }
    }
  }

  #receive(m: JsMsg): void {
    if (this.#stopped) return;
    if (this.#checking) {
      this.#checking.push(m);
      return;
    }
    if (m.seq < this.#expected) {
      // Redelivered while held here: the newest delivery is the one to acknowledge.
      if (this.#unacked.has(m.seq)) this.#unacked.set(m.seq, replyOf(m));
      return;
    }
    if (m.seq > this.#expected) {
      this.#checking = [m];
      void this.#checkGap(this.#expected, m.seq);
      return;
    }
    this.#accept(m);
  }

  /** Messages to ask for: about PULL_BYTES at the sizes seen, one at least, and never past max_ack_pending. */
  #pullSize(): number {
    const room = this.#options.maxAckPending - this.#unacked.size;
    return Math.max(1, Math.min(PULL_MESSAGES_MAX, room, Math.floor(PULL_BYTES / this.#meanBytes)));
  }

  #accept(m: JsMsg): void {
    this.#meanBytes = this.#meanBytes * 0.9 + (m.data.length + HEADER_BYTES) * 0.1;
    this.#expected = m.seq + 1;
    this.#unacked.set(m.seq, replyOf(m));
    this.#held.push(m);
    if (!this.#offerScheduled) {
      this.#offerScheduled = true;
      setImmediate(() => {
        this.#offerScheduled = false;
        this.#offerHeld();
      });
    }
  }

  /** Messages from `from` up to `to` (exclusive) were not delivered: gone from the stream, or lost on the way. */
  async #checkGap(from: number, to: number): Promise<void> {
    let lost: boolean;
    try {
      lost = await this.#options.heldInStream(from, to);
    } catch (cause) {
      this.#options.onError(cause as Error);
      lost = true;
    }
    const waiting = this.#checking ?? [];
    this.#checking = null;
    if (lost) {
      this.#halt('gap');
      return;
    }
    this.#expected = to;
    for (const m of waiting) this.#receive(m);
    this.#wakeUp();
  }

  #offerHeld(): void {
    const { topic, partition } = this.#options;
    while (!this.#paused && !this.#stopped && this.#held.length > 0) {
      const chunk = this.#held.slice(0, OFFER_CHUNK);
      const taken = this.#options.offer(chunk.map((m) => toInboundRecord(topic, partition, m)));
      this.#held.splice(0, taken);
      if (taken < chunk.length) break;
    }
    if (this.#held.length === 0) this.#wakeUp();
  }

  #wakeUp(): void {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }
}

/**
 * The subject a message's acknowledgements go to. nats.js' message class has it (`JsMsgImpl.reply`) though its
 * public type does not: acknowledging through it with a plain request can be retried after a timeout, where
 * `ackAck()` marks the message acknowledged before the server has answered; and it spares keeping every payload.
 */
function replyOf(m: JsMsg): string {
  const reply = (m as JsMsg & { reply?: string }).reply;
  if (!reply) throw new Error(`message ${m.seq} has no reply subject: it cannot be acknowledged`);
  return reply;
}
