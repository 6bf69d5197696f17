import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Watermark } from './watermark.ts';

// Increasing offsets with holes, and an order in which (a subset of) them settle.
const scenario = fc
  .array(fc.integer({ min: 1, max: 3 }), { minLength: 1, maxLength: 200 })
  .map((steps) => {
    let o = 100n;
    return steps.map((s) => (o += BigInt(s)));
  })
  .chain((offsets) => fc.tuple(fc.constant(offsets), fc.shuffledSubarray(offsets)));

test('watermark: the committable offset is one past the longest settled prefix, never past an unsettled offset', () => {
  fc.assert(
    fc.property(scenario, ([offsets, settleOrder]) => {
      const w = new Watermark();
      for (const o of offsets) w.track(o);
      const settled = new Set<bigint>();
      for (const o of settleOrder) {
        w.settle(o);
        settled.add(o);
        let prefix = 0;
        while (prefix < offsets.length && settled.has(offsets[prefix]!)) prefix++;
        const expected = prefix === 0 ? null : offsets[prefix - 1]! + 1n;
        assert.equal(w.committable(), expected);
        const firstUnsettled = offsets.find((x) => !settled.has(x));
        if (firstUnsettled !== undefined && expected !== null) assert.ok(expected <= firstUnsettled);
        assert.equal(w.pending(), offsets.length - prefix);
      }
    }),
  );
});

test('watermark: settling everything in any order commits one past the last offset; it never moves backwards', () => {
  fc.assert(
    fc.property(
      scenario.chain(([o]) =>
        fc.tuple(fc.constant(o), fc.shuffledSubarray(o, { minLength: o.length, maxLength: o.length })),
      ),
      ([offsets, order]) => {
        const w = new Watermark();
        let previous = -1n;
        let next = 0;
        // Interleave tracking and settling: an offset settles only after it was tracked.
        for (const o of order) {
          while (next < offsets.length && offsets[next]! <= o) w.track(offsets[next++]!);
          w.settle(o);
          const c = w.committable();
          if (c !== null) {
            assert.ok(c >= previous);
            previous = c;
          }
        }
        assert.equal(w.committable(), offsets[offsets.length - 1]! + 1n);
      },
    ),
  );
});

test('watermark: out-of-order tracking is refused', () => {
  const w = new Watermark();
  w.track(5n);
  assert.throws(() => w.track(5n), RangeError);
});
