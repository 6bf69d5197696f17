import type { TopicPartition } from '../ports/subscriber.ts';

/** What a subscriber's reader of one partition offers to the readers it belongs to. */
export interface PartitionReading {
  pause(): void;
  resume(): void;
  /** Stops reading at once; resolves when it has (what it held unacknowledged goes back to the broker). */
  stop(): Promise<unknown>;
}

export interface LeasedReadersOptions<R extends PartitionReading> {
  /**
   * Starts reading a partition this member holds (paused when the sink paused it before). Throws when it cannot
   * yet (the broker away): the partition stays held and unread, and is tried again on the next `readMissing`.
   * `stillHeld` says whether the partition is still this member's (an assignment may come while opening): checked
   * before reading starts, so a lost partition is never read; open then returns null.
   */
  open(p: TopicPartition, paused: boolean, stillHeld: () => boolean): Promise<R | null>;
  /** The sink's `onAssignment`. */
  onAssignment(held: TopicPartition[]): void;
  /** Told of a partition that could not be opened. */
  onError(error: unknown, p: TopicPartition): void;
}

const key = (p: TopicPartition) => `${p.topic}:${p.partition}`;

/**
 * The partition readers of a subscriber whose partitions come from leases (ports/partition-assignment.ts) rather
 * than from the broker's group coordinator — NATS JetStream's and RabbitMQ's. Keeps what the assignment says this
 * member holds, one reader per held partition, and which partitions the sink paused (a reader opened later starts
 * paused). A reader of a lost partition stops before the assignment gives its lease back; gained partitions are
 * opened one after the other in the background, never two such runs at once.
 */
export class LeasedReaders<R extends PartitionReading> {
  readonly #options: LeasedReadersOptions<R>;
  readonly #readers = new Map<string, R>();
  readonly #paused = new Set<string>();
  /** What the assignment says this member holds (a partition that could not be opened is held and not read). */
  #held = new Map<string, TopicPartition>();
  #opening: Promise<void> = Promise.resolve();
  #openingQueued = false;
  #closed = false;

  constructor(options: LeasedReadersOptions<R>) {
    this.#options = options;
  }

  /** The assignment's `onChange`: resolves once the readers of lost partitions have stopped. */
  assign(held: TopicPartition[]): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#held = new Map(held.map((p) => [key(p), p]));
    const lost = [...this.#readers.entries()].filter(([k]) => !this.#held.has(k));
    for (const [k] of lost) this.#readers.delete(k);
    for (const k of this.#paused) if (!this.#held.has(k)) this.#paused.delete(k);
    const stopped = Promise.all(lost.map(([, reader]) => reader.stop()));
    this.#options.onAssignment(held);
    this.readMissing();
    return stopped.then(() => undefined);
  }

  /** Opens every held partition that has no reader. */
  readMissing(): void {
    if (this.#openingQueued || this.#closed) return;
    if ([...this.#held.keys()].every((k) => this.#readers.has(k))) return;
    this.#openingQueued = true;
    this.#opening = this.#opening
      .then(async () => {
        this.#openingQueued = false;
        for (const [k, p] of this.#held) if (!this.#closed && !this.#readers.has(k)) await this.#open(k, p);
      })
      .catch(() => {});
  }

  async #open(k: string, p: TopicPartition): Promise<void> {
    const stillHeld = () => !this.#closed && this.#held.has(k);
    try {
      const reader = await this.#options.open(p, this.#paused.has(k), stillHeld);
      if (!reader) return;
      // Lost meanwhile (a new assignment came while opening), or closing: the next holder reads it.
      if (!stillHeld()) await reader.stop();
      else this.#readers.set(k, reader);
    } catch (cause) {
      this.#options.onError(cause, p);
    }
  }

  /** A reader that ended on its own (its channel lost, a delivery gap) is dropped, and its partition read again. */
  ended(p: TopicPartition, reader: R): void {
    if (this.#readers.get(key(p)) !== reader) return;
    this.#readers.delete(key(p));
    this.readMissing();
  }

  /** The current reader of a partition, if it is being read. */
  get(p: TopicPartition): R | undefined {
    return this.#readers.get(key(p));
  }

  all(): R[] {
    return [...this.#readers.values()];
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

  /** Stops every reader at once, and opens none after (one being opened stops itself). */
  async close(): Promise<void> {
    this.#closed = true;
    const readers = this.all();
    this.#readers.clear();
    await Promise.all(readers.map((r) => r.stop()));
    await this.#opening;
  }
}
