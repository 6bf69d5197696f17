import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError } from '../errors.ts';

/**
 * How long to wait before the next action so that actions start at most `ratePerSecond` a second: at least one
 * interval after the previous start, never in a burst to catch up after a slow one. Pure.
 */
export function paceDelayMs(now: number, previousStart: number | null, ratePerSecond: number): number {
  if (previousStart === null) return 0;
  return Math.max(0, previousStart + 1000 / ratePerSecond - now);
}

/** Token pacing for batch repairs (like failures replay's spread): `await pacer.next()` before each action. */
export class Pacer {
  readonly #rate: number;
  readonly #clock: () => number;
  readonly #sleep: (ms: number) => Promise<unknown>;
  #previous: number | null = null;

  constructor(ratePerSecond: number, clock: () => number = Date.now, wait: (ms: number) => Promise<unknown> = sleep) {
    if (!(ratePerSecond > 0) || !Number.isFinite(ratePerSecond))
      throw new ConfigError(`repair rate must be a number > 0 per second, got ${ratePerSecond}`);
    this.#rate = ratePerSecond;
    this.#clock = clock;
    this.#sleep = wait;
  }

  /** Waits for the next slot; returns when the action may start. */
  async next(): Promise<void> {
    const delay = paceDelayMs(this.#clock(), this.#previous, this.#rate);
    if (delay > 0) await this.#sleep(delay);
    this.#previous = this.#clock();
  }
}
