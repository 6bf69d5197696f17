/**
 * A rate from samples of a counter that only grows (a log end offset, a committed offset): the slope between
 * the oldest and newest sample inside the window. Bounded: samples older than the window are dropped.
 * A counter that went backwards (a topic recreated) restarts the window.
 */
export class RateWindow {
  readonly #windowMs: number;
  #samples: Array<{ at: number; value: number }> = [];

  constructor(windowMs = 60_000) {
    this.#windowMs = windowMs;
  }

  add(at: number, value: number): void {
    const last = this.#samples.at(-1);
    if (last && value < last.value) this.#samples = [];
    if (last && at <= last.at) return;
    this.#samples.push({ at, value });
    while (this.#samples.length > 2 && this.#samples[0]!.at < at - this.#windowMs) this.#samples.shift();
  }

  /** Per second; null until two samples at least a second apart exist. */
  perSecond(): number | null {
    const first = this.#samples[0];
    const last = this.#samples.at(-1);
    if (!first || !last || last.at - first.at < 1000) return null;
    return ((last.value - first.value) * 1000) / (last.at - first.at);
  }
}

/**
 * Seconds until a backlog is gone at the current rates: backlog ÷ (consume rate − produce rate). Null when the
 * rates are unknown or it is not draining (consumption not faster than production); 0 when nothing is behind.
 */
export function drainSeconds(backlog: number, consumeRate: number | null, produceRate: number | null): number | null {
  if (backlog <= 0) return 0;
  if (consumeRate === null || produceRate === null) return null;
  const net = consumeRate - produceRate;
  return net > 0 ? backlog / net : null;
}
