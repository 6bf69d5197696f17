import type { InboundRecord } from '../ports/subscriber.ts';

/**
 * One event held by the consumer, from the fetch until it settles.
 *
 *   queued ──take()──▶ in-flight ──settle()──▶ (gone)
 *      ▲                   │
 *      └──(backoff ends)── waiting ◀──hold()── (a transient failure retried in memory)
 *
 * `P` is the caller's handle of the record's partition (the offset committer's state).
 */
export interface HeldEvent<P> {
  readonly record: InboundRecord;
  readonly offset: bigint;
  readonly bytes: number;
  readonly part: P;
  readonly aggregate: string;
  /** Attempts so far (0 until its first task returns). */
  attempt: number;
  state: 'queued' | 'in-flight' | 'waiting';
}

/** Caps on what is held (queued + in flight + waiting). */
export interface HoldLimits {
  maxEvents: number;
  maxBytes: number;
}

interface Entry<P> extends HeldEvent<P> {
  timer?: NodeJS.Timeout;
}

/**
 * One aggregate's FIFO: `items[head…]` are held, in order; the slots before `head` were settled. Settling the head
 * (the common case: an aggregate's events settle in order) moves `head` on, O(1); the settled prefix is cut off
 * once it is at least half the array, so the work stays amortised O(1) per event however many an aggregate holds.
 */
interface Queue<P> {
  items: Array<Entry<P> | undefined>;
  head: number;
}

/** Slots settled before the prefix is cut off (smaller queues just move `head`). */
const COMPACT_AT = 32;

/**
 * The consumer's per-aggregate FIFO queues, pure of any broker or database. An aggregate (the record key) is
 * *ready* when its head is queued; `take` hands out ready heads only, of distinct aggregates, so at most one
 * event per aggregate is ever in flight and an aggregate's events run in the order they were received.
 * What is held is capped in count and bytes: `offer` refuses a record once a cap is reached, so the count cap
 * holds exactly and the byte cap is passed by at most the one record that reached it.
 */
export class AggregateQueues<P> {
  readonly #limits: HoldLimits;
  readonly #queues = new Map<string, Queue<P>>();
  readonly #ready = new Set<string>();
  #events = 0;
  #bytes = 0;

  constructor(limits: HoldLimits) {
    this.#limits = limits;
  }

  /** Events held now (queued, in flight or waiting). */
  get events(): number {
    return this.#events;
  }

  /** Bytes held now (value length + a fixed overhead per record). */
  get bytes(): number {
    return this.#bytes;
  }

  /** Aggregates whose head may be taken. */
  get readyCount(): number {
    return this.#ready.size;
  }

  /** A cap is reached: nothing more is taken in (and the caller pauses fetching). */
  atCap(): boolean {
    return this.#events >= this.#limits.maxEvents || this.#bytes >= this.#limits.maxBytes;
  }

  /** Below half of both caps: fetching may resume (the gap keeps pause and resume from flapping). */
  belowHalf(): boolean {
    return this.#events < this.#limits.maxEvents / 2 && this.#bytes < this.#limits.maxBytes / 2;
  }

  /** Queues a record behind its aggregate's earlier ones; undefined (not taken) when a cap is reached. */
  offer(record: InboundRecord, offset: bigint, part: P, aggregate: string): HeldEvent<P> | undefined {
    if (this.atCap()) return undefined;
    const bytes = (record.value?.length ?? 0) + 256;
    const event: Entry<P> = { record, offset, bytes, part, aggregate, attempt: 0, state: 'queued' };
    let queue = this.#queues.get(aggregate);
    if (!queue) {
      queue = { items: [], head: 0 };
      this.#queues.set(aggregate, queue);
    }
    queue.items.push(event);
    if (queue.items.length - queue.head === 1) this.#ready.add(aggregate);
    this.#events++;
    this.#bytes += bytes;
    return event;
  }

  /** Takes up to `max` ready heads (distinct aggregates, oldest ready first) and marks them in flight. */
  take(max: number): Array<HeldEvent<P>> {
    const batch: Array<HeldEvent<P>> = [];
    for (const aggregate of this.#ready) {
      if (batch.length >= max) break;
      this.#ready.delete(aggregate);
      const head = headOf(this.#queues.get(aggregate)!)!;
      head.state = 'in-flight';
      batch.push(head);
    }
    return batch;
  }

  /** Takes a settled (or abandoned) event off its queue; the next one of its aggregate becomes ready. */
  settle(event: HeldEvent<P>): void {
    const entry = event as Entry<P>;
    const queue = this.#queues.get(entry.aggregate);
    if (!queue) return;
    if (headOf(queue) === entry) {
      queue.items[queue.head++] = undefined;
      if (queue.head >= COMPACT_AT && queue.head * 2 >= queue.items.length) {
        queue.items = queue.items.slice(queue.head);
        queue.head = 0;
      }
    } else {
      // Not the head: only a drop settles out of order (a queued or waiting event of a revoked partition).
      const index = queue.items.indexOf(entry, queue.head);
      if (index < 0) return;
      queue.items.splice(index, 1);
    }
    this.#forget(entry);
    this.#afterRemoval(entry.aggregate, queue);
  }

  /**
   * An in-flight head failed transiently: it waits `delayMs` at the head of its queue (its successors wait
   * behind it), then is ready again and `onReady` runs.
   */
  hold(event: HeldEvent<P>, delayMs: number, onReady: () => void): void {
    const entry = event as Entry<P>;
    entry.state = 'waiting';
    entry.timer = setTimeout(() => {
      entry.timer = undefined;
      if (!this.release(entry)) return;
      onReady();
    }, delayMs);
  }

  /** Ends a head's wait now; false when it is no longer a waiting head (settled or dropped meanwhile). */
  release(event: HeldEvent<P>): boolean {
    const entry = event as Entry<P>;
    const queue = this.#queues.get(entry.aggregate);
    if (!queue || headOf(queue) !== entry || entry.state !== 'waiting') return false;
    if (entry.timer) clearTimeout(entry.timer);
    entry.timer = undefined;
    entry.state = 'queued';
    this.#ready.add(entry.aggregate);
    return true;
  }

  /** Drops every event not in flight (queued or waiting) that matches; in-flight ones finish first. */
  drop(match: (event: HeldEvent<P>) => boolean): void {
    for (const [aggregate, queue] of [...this.#queues]) {
      const kept: Array<Entry<P>> = [];
      for (let i = queue.head; i < queue.items.length; i++) {
        const event = queue.items[i]!;
        if (event.state !== 'in-flight' && match(event)) this.#forget(event);
        else kept.push(event);
      }
      if (kept.length === queue.items.length - queue.head) continue;
      queue.items = kept;
      queue.head = 0;
      this.#afterRemoval(aggregate, queue);
    }
  }

  /** Every held event, in queue order per aggregate (for tests and diagnostics). */
  *held(): IterableIterator<HeldEvent<P>> {
    for (const queue of this.#queues.values()) {
      for (let i = queue.head; i < queue.items.length; i++) yield queue.items[i]!;
    }
  }

  /** An event leaves what is held: its timer stops, the counts drop. */
  #forget(entry: Entry<P>): void {
    if (entry.timer) clearTimeout(entry.timer);
    this.#events--;
    this.#bytes -= entry.bytes;
  }

  /** After events left an aggregate's queue: an empty queue goes; a queued head makes the aggregate ready. */
  #afterRemoval(aggregate: string, queue: Queue<P>): void {
    const head = headOf(queue);
    if (!head) {
      this.#queues.delete(aggregate);
      this.#ready.delete(aggregate);
    } else if (head.state === 'queued') {
      this.#ready.add(aggregate);
    }
  }
}

function headOf<P>(queue: Queue<P>): Entry<P> | undefined {
  return queue.items[queue.head];
}
