/**
 * Full-jitter exponential backoff (docs/design.md §7): random(0, min(cap, base · 2^min(attempt, maxExponent))).
 * Full jitter spreads retries of many failed events over the whole window, so a broker coming back is not hit
 * by a synchronised wave.
 */
export interface BackoffOptions {
  /** @defaultValue 500 */
  baseMs: number;
  /** @defaultValue 120_000 (2 minutes) */
  capMs: number;
  /** @defaultValue 8 */
  maxExponent: number;
}

export const defaultBackoff: BackoffOptions = { baseMs: 500, capMs: 120_000, maxExponent: 8 };

/** The upper bound of the delay for `attempt` (0-based: the first retry is attempt 0). */
export function backoffCeilingMs(attempt: number, options: BackoffOptions = defaultBackoff): number {
  const exponent = Math.min(Math.max(0, Math.floor(attempt)), options.maxExponent);
  return Math.min(options.capMs, options.baseMs * 2 ** exponent);
}

/** A delay in [0, ceiling], integer milliseconds. `random` returns [0, 1) like Math.random. */
export function backoffDelayMs(
  attempt: number,
  options: BackoffOptions = defaultBackoff,
  random: () => number = Math.random,
): number {
  const ceiling = backoffCeilingMs(attempt, options);
  return Math.min(ceiling, Math.floor(random() * (ceiling + 1)));
}
