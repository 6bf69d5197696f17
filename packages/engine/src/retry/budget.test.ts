import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { backoffCeilingMs } from './backoff.ts';
import { defaultRetryBudget, nextRetry } from './budget.ts';

test('budget: retries within the backoff bounds until attempts run out', () => {
  const first = 1_000_000;
  const d1 = nextRetry({ attempt: 1, firstFailedAt: first, now: first, random: () => 0.999 });
  assert.deepEqual(d1, { action: 'retry', delayMs: 500, at: first + 500 });
  const d3 = nextRetry({ attempt: 3, firstFailedAt: first, now: first + 2000, random: () => 0.5 });
  assert.equal(d3.action, 'retry');
  assert.equal(nextRetry({ attempt: 10, firstFailedAt: first, now: first }).action, 'exhausted');
});

test('budget: past the event deadline the command is expired; near it the delay is cut to the deadline', () => {
  assert.deepEqual(nextRetry({ attempt: 1, firstFailedAt: 0, now: 5000, deadline: 5000 }), { action: 'expired' });
  const d = nextRetry({ attempt: 8, firstFailedAt: 0, now: 1000, deadline: 1200, random: () => 0.99 });
  assert.deepEqual(d, { action: 'retry', delayMs: 200, at: 1200 });
});

test('property: decisions respect attempts, total time, deadline and the backoff ceiling', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 30 }),
      fc.integer({ min: 0, max: 10_000_000 }),
      fc.integer({ min: 0, max: 5_000_000 }),
      fc.option(fc.integer({ min: 0, max: 20_000_000 }), { nil: null }),
      fc.record({ maxAttempts: fc.integer({ min: 1, max: 20 }), maxTotalMs: fc.integer({ min: 1, max: 10_000_000 }) }),
      fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
      (attempt, firstFailedAt, elapsed, deadline, limits, r) => {
        const now = firstFailedAt + elapsed;
        const budget = { ...defaultRetryBudget, ...limits };
        const d = nextRetry({ attempt, firstFailedAt, now, deadline, budget, random: () => r });
        if (deadline !== null && now >= deadline) return d.action === 'expired';
        if (attempt >= budget.maxAttempts) return d.action === 'exhausted' && d.reason === 'attempts';
        if (d.action === 'exhausted') return d.reason === 'total_time';
        if (d.action !== 'retry') return false;
        return (
          d.delayMs >= 0 &&
          d.delayMs <= backoffCeilingMs(attempt - 1) &&
          d.at === now + d.delayMs &&
          d.at <= firstFailedAt + budget.maxTotalMs &&
          (deadline === null || d.at <= deadline)
        );
      },
    ),
  );
});
