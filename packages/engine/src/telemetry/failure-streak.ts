import type { Logger } from './logger.ts';

/**
 * A run of failures of one loop, logged as a run: a line at its first failure, one every `every` failures
 * while it lasts, and one when it ends — not a line per attempt (a database away for half an hour would write
 * some 17,000 identical lines).
 */
export class FailureStreak {
  readonly #log: Logger;
  readonly #what: string;
  readonly #every: number;
  #count = 0;
  #since = 0;

  constructor(log: Logger, what: string, every = 50) {
    this.#log = log;
    this.#what = what;
    this.#every = every;
  }

  /** Failures in the current streak (0: the last attempt succeeded). */
  get count(): number {
    return this.#count;
  }

  failed(cause: unknown, fields: Record<string, unknown> = {}): void {
    this.#count++;
    if (this.#count === 1) {
      this.#since = Date.now();
      this.#log.warn({ ...fields, err: describe(cause) }, `${this.#what} failed; retrying with backoff`);
    } else if (this.#count % this.#every === 0) {
      this.#log.warn(
        { ...fields, err: describe(cause), failures: this.#count, forMs: Date.now() - this.#since },
        `${this.#what} still failing`,
      );
    }
  }

  succeeded(): void {
    if (this.#count === 0) return;
    this.#log.warn({ failures: this.#count, forMs: Date.now() - this.#since }, `${this.#what} recovered`);
    this.#count = 0;
  }
}

/** An error's text, also for one that crossed a worker thread as a plain object (String() gives "[object Object]"). */
function describe(cause: unknown): string {
  if (cause instanceof Error) return String(cause);
  if (cause && typeof cause === 'object') {
    const { name, message, code } = cause as { name?: unknown; message?: unknown; code?: unknown };
    if (typeof message === 'string')
      return `${typeof name === 'string' ? name : 'Error'}: ${message}${typeof code === 'string' ? ` [${code}]` : ''}`;
    return JSON.stringify(cause);
  }
  return String(cause);
}
