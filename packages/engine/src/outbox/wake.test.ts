import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { parseWakePayload, wakePayload } from './wake.ts';

test('a wake payload names its lanes in order, and reads back as the same lanes', () => {
  fc.assert(
    fc.property(fc.uniqueArray(fc.integer({ min: 0, max: 32_767 }), { minLength: 1, maxLength: 16 }), (lanes) => {
      const payload = wakePayload(new Set(lanes));
      assert.deepEqual(
        parseWakePayload(payload),
        [...lanes].sort((a, b) => a - b),
      );
    }),
  );
});

test('an empty or foreign payload wakes every lane', () => {
  assert.equal(wakePayload('all'), '');
  for (const payload of ['', '  ', 'orders', '1,x', '-1', '1.5', '3,,4'])
    assert.equal(parseWakePayload(payload), null, payload);
});
