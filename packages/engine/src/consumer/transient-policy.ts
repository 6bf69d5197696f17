import { backoffDelayMs, type BackoffOptions } from '../retry/backoff.ts';

/**
 * In-memory retries: what happens to an event whose handler failed transiently when there is no durable retry
 * (a consumer built without a scheduler, or the ledger row could not be written). It stays in memory, in
 * flight, blocking only its aggregate and holding its partition's watermark, and is dispatched again after a
 * jittered backoff; a crash simply re-reads it from the committed offset. With durable retries the retry ledger
 * and its scheduler decide instead (consumer/settle.ts, retry/process-retry.ts).
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
