import type { Consumer as JsConsumer, ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import { BrokerError } from '../../errors.ts';
import type { InboundRecord } from '../../ports/subscriber.ts';
import { toInboundRecord } from './inbound.ts';

export interface PartitionReaderOptions {
  topic: string;
  partition: number;
  /** The sink's `onRecords`: takes a prefix of the records. */
  offer: (records: InboundRecord[]) => number;
  /** Messages delivered and not yet acknowledged, at most: the durable's max_ack_pending. */
  maxAckPending: number;
  /** Messages asked for in one pull. @defaultValue 256 */
  fetchBatch?: number;
  /** Told of a pull that failed; the reader pulls again after a pause. */
  onError: (error: Error) => void;
}

/** Records handed to the sink at a time. */
const OFFER_CHUNK = 100;
/** How long one pull waits on the server for messages (nats.js' minimum is 1 s; reconnects end a pull too). */
const PULL_EXPIRES_MS = 5000;
const RETRY_PAUSE_MS = 1000;

/**
 * Reads one partition stream through the group's durable pull consumer, for the member holding its lease.
 *
 * Pulls bounded batches, and offers each message to the sink as it arrives (a message of a slow stream waits for
 * nothing). What the sink does not take (it is at its caps) is held here — at most one pull — and offered again
 * on `resume`; no new pull starts while anything is held or the sink has paused the partition. Every message
 * delivered and not yet acknowledged is kept by its sequence, for the watermark acknowledgement (`commit`) and to
 * tell the broker it is still being worked on (`extend`), so none is redelivered while this member holds it.
 */
export class PartitionReader {
  readonly #options: PartitionReaderOptions;
  readonly #consumer: JsConsumer;
  readonly #unacked = new Map<number, JsMsg>();
  #held: JsMsg[] = [];
  #highest = 0;
  #paused = false;
  #stopped = false;
  #pull: ConsumerMessages | null = null;
  #wake: (() => void) | null = null;
  #offerScheduled = false;
  readonly done: Promise<void>;

  constructor(consumer: JsConsumer, options: PartitionReaderOptions) {
    this.#consumer = consumer;
    this.#options = options;
    this.done = this.#run();
  }

  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    this.#paused = false;
    this.#offerHeld();
    this.#wakeUp();
  }

  /** Stops pulling; what is held is dropped (the next holder reads it again from the ack floor). */
  stop(): Promise<void> {
    this.#stopped = true;
    this.#held = [];
    this.#pull?.stop();
    this.#wakeUp();
    return this.done;
  }

  /** Acknowledges every message up to `sequence` (AckAll), confirmed by the server. */
  async commit(sequence: number): Promise<void> {
    let last: JsMsg | undefined;
    let lastSeq = 0;
    for (const [seq, m] of this.#unacked) if (seq <= sequence && seq > lastSeq) [last, lastSeq] = [m, seq];
    if (!last) return;
    const acknowledged = await last.ackAck();
    if (!acknowledged)
      throw new BrokerError('nats_ack_unconfirmed', 'transient', `ack of sequence ${lastSeq} was not confirmed`);
    for (const seq of this.#unacked.keys()) if (seq <= lastSeq) this.#unacked.delete(seq);
    this.#wakeUp();
  }

  /** Resets the ack wait of every message this member holds unacknowledged. */
  extend(): void {
    for (const m of this.#unacked.values()) m.working();
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      const room = Math.min(this.#options.fetchBatch ?? 256, this.#options.maxAckPending - this.#unacked.size);
      if (this.#paused || this.#held.length > 0 || room <= 0) {
        await new Promise<void>((resolve) => (this.#wake = resolve));
        continue;
      }
      try {
        this.#pull = await this.#consumer.fetch({ max_messages: room, expires: PULL_EXPIRES_MS });
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
    if (m.seq <= this.#highest) {
      // Redelivered while held here: the newest delivery is the one to acknowledge.
      if (this.#unacked.has(m.seq)) this.#unacked.set(m.seq, m);
      return;
    }
    this.#highest = m.seq;
    this.#unacked.set(m.seq, m);
    this.#held.push(m);
    // Messages of one socket read arrive in one go: offered together.
    if (!this.#offerScheduled) {
      this.#offerScheduled = true;
      setImmediate(() => {
        this.#offerScheduled = false;
        this.#offerHeld();
      });
    }
  }

  #offerHeld(): void {
    while (!this.#paused && !this.#stopped && this.#held.length > 0) {
      const chunk = this.#held.slice(0, OFFER_CHUNK);
      const taken = this.#options.offer(
        chunk.map((m) => toInboundRecord(this.#options.topic, this.#options.partition, m)),
      );
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
