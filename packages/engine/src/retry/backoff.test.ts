import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { backoffCeilingMs, backoffDelayMs, defaultBackoff } from './backoff.ts';

test('backoff ceiling doubles from 500 ms and is capped at 2 minutes from attempt 8 on', () => {
  assert.deepEqual(
    [0, 1, 2, 3, 7, 8, 9, 50].map((a) => backoffCeilingMs(a)),
    [500, 1000, 2000, 4000, 64_000, 120_000, 120_000, 120_000],
  );
});

test('backoff delay is always within [0, ceiling] and an integer', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 10_000 }),
      fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
      (attempt, r) => {
        const delay = backoffDelayMs(attempt, defaultBackoff, () => r);
        return Number.isInteger(delay) && delay >= 0 && delay <= backoffCeilingMs(attempt) && delay <= 120_000;
      },
    ),
  );
});

test('backoff uses the full jitter window: the extremes of random map to 0 and to the ceiling', () => {
  assert.equal(
    backoffDelayMs(3, defaultBackoff, () => 0),
    0,
  );
  assert.equal(
    backoffDelayMs(3, defaultBackoff, () => 0.999_999_999),
    4000,
  );
});

test('backoff jitter spreads: 2000 draws at attempt 4 cover every quarter of the window', () => {
  const ceiling = backoffCeilingMs(4);
  const quarters = new Set<number>();
  for (let i = 0; i < 2000; i++) quarters.add(Math.min(3, Math.floor((backoffDelayMs(4) / (ceiling + 1)) * 4)));
  assert.deepEqual([...quarters].sort(), [0, 1, 2, 3]);
});

test('backoff ceiling is monotonic in the attempt and respects custom options', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 100 }),
      fc.record({
        baseMs: fc.integer({ min: 1, max: 10_000 }),
        capMs: fc.integer({ min: 1, max: 1_000_000 }),
        maxExponent: fc.integer({ min: 0, max: 20 }),
      }),
      (attempt, options) =>
        backoffCeilingMs(attempt, options) <= backoffCeilingMs(attempt + 1, options) &&
        backoffCeilingMs(attempt, options) <= options.capMs,
    ),
  );
});
