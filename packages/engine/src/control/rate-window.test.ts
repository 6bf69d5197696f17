import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { RateWindow, drainSeconds } from './rate-window.ts';

test('a steady counter gives its slope per second', () => {
  const w = new RateWindow(60_000);
  for (let s = 0; s <= 10; s++) w.add(s * 1000, s * 250);
  assert.equal(w.perSecond(), 250);
});

test('no rate until two samples a second apart; a counter going backwards restarts the window', () => {
  const w = new RateWindow();
  w.add(0, 10);
  assert.equal(w.perSecond(), null);
  w.add(500, 20);
  assert.equal(w.perSecond(), null);
  w.add(2000, 30);
  assert.equal(w.perSecond(), 10);
  w.add(3000, 5);
  assert.equal(w.perSecond(), null);
});

test('samples older than the window are dropped (bounded memory)', () => {
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 1, max: 5000 }), { minLength: 3, maxLength: 500 }), (steps) => {
      const w = new RateWindow(10_000);
      let at = 0;
      let value = 0;
      for (const step of steps) w.add((at += step), (value += step));
      const rate = w.perSecond();
      // value grows by exactly the elapsed ms, so any window's slope is 1000/s.
      return rate === null || Math.abs(rate - 1000) < 1e-9;
    }),
  );
});

test('drain estimate: backlog over the net rate, null when not draining', () => {
  assert.equal(drainSeconds(1000, 300, 100), 5);
  assert.equal(drainSeconds(1000, 100, 100), null);
  assert.equal(drainSeconds(1000, 50, 100), null);
  assert.equal(drainSeconds(1000, null, 100), null);
  assert.equal(drainSeconds(0, null, null), 0);
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 1e9 }),
      fc.integer({ min: 0, max: 1e6 }),
      fc.integer({ min: 0, max: 1e6 }),
      (b, c, p) => {
        const d = drainSeconds(b, c, p);
        return c > p ? d !== null && d > 0 && Math.abs(d * (c - p) - b) <= 1e-6 * b : d === null;
      },
    ),
  );
});
