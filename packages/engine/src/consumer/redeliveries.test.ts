import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { Redeliveries } from './redeliveries.ts';

test('redeliveries: an offset at or below one received before on the same partition is a redelivery', () => {
  const r = new Redeliveries();
  assert.deepEqual(
    [r.received('t/0', 5n), r.received('t/0', 6n), r.received('t/1', 3n), r.received('t/0', 6n), r.received('t/0', 4n)],
    [false, false, false, true, true],
  );
});

test('redeliveries (property): the count equals the records not above the running maximum of their partition', () => {
  const delivery = fc.tuple(fc.integer({ min: 0, max: 3 }), fc.bigInt({ min: 0n, max: 50n }));
  fc.assert(
    fc.property(fc.array(delivery, { maxLength: 200 }), (deliveries) => {
      const r = new Redeliveries();
      const max = new Map<number, bigint>();
      for (const [p, offset] of deliveries) {
        const expected = max.has(p) && offset <= max.get(p)!;
        assert.equal(r.received(`t/${p}`, offset), expected);
        if (!expected) max.set(p, offset);
      }
    }),
  );
});
