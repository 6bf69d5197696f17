import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { resolveStopPolicy, shouldStop } from './stop-policy.ts';

test('the canary: any failure among the first N stops the batch; none lets it go on', () => {
  const p = resolveStopPolicy({ canary: 3, maxErrorRatio: 0.5, minSample: 3 });
  assert.equal(shouldStop({ done: 1, failed: 1 }, p), 'canary_failed');
  assert.equal(shouldStop({ done: 3, failed: 1 }, p), 'canary_failed');
  assert.equal(shouldStop({ done: 3, failed: 0 }, p), null);
});

test('past the canary the batch stops exactly when the error ratio exceeds the bound (after the minimum sample)', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 10 }),
      fc.double({ min: 0, max: 1, noNaN: true }),
      fc.integer({ min: 1, max: 20 }),
      fc.integer({ min: 0, max: 200 }),
      fc.integer({ min: 0, max: 200 }),
      (canary, maxErrorRatio, minSample, done, failedRaw) => {
        const failed = Math.min(done, failedRaw);
        const p = resolveStopPolicy({ canary, maxErrorRatio, minSample });
        const r = shouldStop({ done, failed }, p);
        if (done <= canary) return r === (failed > 0 ? 'canary_failed' : null);
        const over = done >= minSample && failed / done > maxErrorRatio;
        return r === (over ? 'error_ratio' : null);
      },
    ),
  );
  assert.throws(() => resolveStopPolicy({ maxErrorRatio: 2 }), /maxErrorRatio must be from 0 to 1/);
});
