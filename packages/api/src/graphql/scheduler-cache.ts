import type { RetryJob, RetryScheduler } from '@postbox/engine/runtime';

export interface SchedulerCacheOptions {
  /** Opens the scheduler of a consumer (a Redis connection). */
  open: (consumer: string) => RetryScheduler;
  /** Schedulers kept open while idle; past it the least recently used idle one is closed. @defaultValue 16 */
  maxOpen?: number;
  /** A scheduler unused this long is closed (opened again when next needed). @defaultValue 60000 */
  idleMs?: number;
}

interface Entry {
  scheduler: RetryScheduler;
  busy: number;
  usedAt: number;
}

/**
 * The control plane's retry schedulers, one per consumer, bounded: `get` hands out a handle that opens the
 * consumer's scheduler on its first call, and schedulers idle for `idleMs` (or past `maxOpen`, least recently used
 * first) are closed. Invariant: a scheduler is never closed while a call on it runs; a handle kept after its
 * scheduler closed opens it again. So the Redis connections are at most `maxOpen` plus those in use at the moment.
 * The control plane only enqueues and looks jobs up: a handle cannot `start` processing.
 */
export class SchedulerCache {
  readonly #open: (consumer: string) => RetryScheduler;
  readonly #maxOpen: number;
  readonly #idleMs: number;
  readonly #entries = new Map<string, Entry>();
  readonly #closing = new Set<Promise<void>>();
  readonly #timer: NodeJS.Timeout;
  #closed = false;

  constructor(options: SchedulerCacheOptions) {
    this.#open = options.open;
    this.#maxOpen = options.maxOpen ?? 16;
    this.#idleMs = options.idleMs ?? 60_000;
    this.#timer = setInterval(() => this.sweep(), Math.max(50, Math.floor(this.#idleMs / 2)));
    this.#timer.unref();
  }

  /** Schedulers open now. */
  get size(): number {
    return this.#entries.size;
  }

  /** The consumer's scheduler, as a handle: nothing is opened until a call is made on it. */
  get(consumer: string): RetryScheduler {
    const use = <T>(call: (s: RetryScheduler) => Promise<T>) => this.#use(consumer, call);
    return {
      consumer,
      schedule: (job: RetryJob) => use((s) => s.schedule(job)),
      ensure: (job: RetryJob) => use((s) => s.ensure(job)),
      has: (job: RetryJob) => use((s) => s.has(job)),
      delayedCount: () => use((s) => s.delayedCount()),
      start: () => {
        throw new Error('the control plane does not process retries: start the consumer for that');
      },
      close: async () => {},
    };
  }

  /** Closes the schedulers idle for `idleMs` by `now`. */
  sweep(now = Date.now()): void {
    for (const [consumer, e] of this.#entries)
      if (e.busy === 0 && now - e.usedAt >= this.#idleMs) this.#evict(consumer, e);
  }

  /** Closes every scheduler and waits for them; idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#timer);
    for (const [consumer, e] of this.#entries) this.#evict(consumer, e);
    await Promise.all(this.#closing);
  }

  async #use<T>(consumer: string, call: (s: RetryScheduler) => Promise<T>): Promise<T> {
    if (this.#closed) throw new Error('the control plane is closing');
    // Most recently used last, so the first idle entry is the one to close when over the bound.
    let e = this.#entries.get(consumer);
    if (e) this.#entries.delete(consumer);
    else e = { scheduler: this.#open(consumer), busy: 0, usedAt: Date.now() };
    this.#entries.set(consumer, e);
    e.busy++;
    this.#trim();
    try {
      return await call(e.scheduler);
    } finally {
      e.busy--;
      e.usedAt = Date.now();
    }
  }

  #trim(): void {
    for (const [consumer, e] of this.#entries) {
      if (this.#entries.size <= this.#maxOpen) return;
      if (e.busy === 0) this.#evict(consumer, e);
    }
  }

  #evict(consumer: string, e: Entry): void {
    if (this.#entries.get(consumer) === e) this.#entries.delete(consumer);
    const closing = e.scheduler.close().catch(() => {});
    this.#closing.add(closing);
    void closing.finally(() => this.#closing.delete(closing));
  }
}
