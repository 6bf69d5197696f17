import { backoffDelayMs, type BackoffOptions } from '../retry/backoff.ts';

/**
 * What happens to an event whose handler failed transiently. For now (issue 3): it stays in memory, in flight,
 * blocking only its aggregate and holding its partition's watermark, and is dispatched again after a jittered
 * backoff; a crash simply re-reads it from the committed offset. The durable retry ledger + BullMQ (issue 4)
 * replaces this module; nothing else decides about transient failures.
 */
export interface TransientPolicy {
  /** Milliseconds to wait before the next attempt (`attempt` = failures so far, 1-based). */
  delayMs(attempt: number): number;
}

export function inMemoryRetry(options?: Partial<BackoffOptions>): TransientPolicy {
  // Shorter than the durable schedule: a held watermark should not wait minutes.
  const backoff: BackoffOptions = { baseMs: 200, capMs: 30_000, maxExponent: 8, ...options };
  return { delayMs: (attempt) => Math.max(50, backoffDelayMs(attempt - 1, backoff)) };
}
