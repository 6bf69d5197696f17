import { backoffDelayMs, defaultBackoff, type BackoffOptions } from './backoff.ts';

/** How long and how often a transient failure is retried. */
export interface RetryBudget {
  /** Attempts in all, the first delivery included. @defaultValue 10 */
  maxAttempts: number;
  /** From the first failure to the last retry. @defaultValue 3_600_000 (1 h) */
  maxTotalMs: number;
  /** The shortest delay between attempts (a floor under the jitter). @defaultValue 0 */
  minDelayMs: number;
  backoff: BackoffOptions;
}

export const defaultRetryBudget: RetryBudget = {
  maxAttempts: 10,
  maxTotalMs: 3_600_000,
  minDelayMs: 0,
  backoff: defaultBackoff,
};

export type RetryDecision =
  | { action: 'retry'; delayMs: number; at: number }
  | { action: 'exhausted'; reason: 'attempts' | 'total_time' }
  | { action: 'expired' };

/**
 * What to do after attempt `attempt` (1-based) failed transiently at `now`.
 * - past the event's own `deadline` → expired (an explicit terminal state: the command is moot);
 * - out of attempts, or the next try would land after firstFailedAt + maxTotalMs → exhausted (failure store);
 * - otherwise a full-jitter delay, shortened so it never lands after the deadline.
 * Pure: `random` and `now` are inputs.
 */
export function nextRetry(input: {
  attempt: number;
  firstFailedAt: number;
  now: number;
  deadline?: number | null;
  budget?: RetryBudget;
  random?: () => number;
}): RetryDecision {
  const budget = input.budget ?? defaultRetryBudget;
  const { attempt, now } = input;
  if (input.deadline != null && now >= input.deadline) return { action: 'expired' };
  if (attempt >= budget.maxAttempts) return { action: 'exhausted', reason: 'attempts' };
  let delayMs = Math.max(budget.minDelayMs ?? 0, backoffDelayMs(attempt - 1, budget.backoff, input.random));
  const at = now + delayMs;
  if (at > input.firstFailedAt + budget.maxTotalMs) return { action: 'exhausted', reason: 'total_time' };
  if (input.deadline != null && at > input.deadline) delayMs = Math.max(0, input.deadline - now);
  return { action: 'retry', delayMs, at: now + delayMs };
}
