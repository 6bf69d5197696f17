import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { Pacer, paceDelayMs } from './pacer.ts';

test('pacing: the first action starts at once, each next one at least 1/rate after the previous start, never in a burst', async () => {
  fc.assert(
    fc.property(
      fc.double({ min: 0.1, max: 1000, noNaN: true }),
      fc.array(fc.integer({ min: 0, max: 5000 }), { minLength: 1, maxLength: 30 }),
      (rate, work) => {
        let now = 1_000_000;
        let previous: number | null = null;
        const starts: number[] = [];
        for (const ms of work) {
          now += paceDelayMs(now, previous, rate);
          starts.push(now);
          previous = now;
          now += ms; // the action itself
        }
        return starts.every((s, i) => i === 0 || s - starts[i - 1]! >= 1000 / rate - 1e-6);
      },
    ),
  );
  assert.equal(paceDelayMs(0, null, 5), 0);
  assert.equal(paceDelayMs(100, 0, 5), 100);
  assert.equal(paceDelayMs(900, 0, 5), 0, 'a slow action is not followed by a catch-up burst, only no wait');
});

test('a pacer at 4/s starts 5 actions 250 ms apart on its clock', async () => {
  let now = 0;
  const pacer = new Pacer(
    4,
    () => now,
    async (ms) => {
      now += ms;
    },
  );
  const starts: number[] = [];
  for (let i = 0; i < 5; i++) {
    await pacer.next();
    starts.push(now);
  }
  assert.deepEqual(starts, [0, 250, 500, 750, 1000]);
  assert.throws(() => new Pacer(0), /rate must be a number > 0/);
});
