import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { expectedVersion, gate, type FirstVersionPolicy } from './version-gate.ts';

const policy = fc.constantFrom<FirstVersionPolicy>('strict', 'adopt');
const version = fc.integer({ min: 1, max: 1_000_000 });

test('gate: old versions are ignored, the next is applied, future ones are parked (any policy)', () => {
  fc.assert(
    fc.property(version, version, policy, (last, v, p) => {
      const d = gate(last, v, p);
      if (v <= last) return d === 'ignore';
      if (v === last + 1) return d === 'apply';
      return d === 'park';
    }),
  );
});

test('gate: with nothing applied, strict applies only version 1 and parks the rest; adopt applies anything', () => {
  fc.assert(
    fc.property(
      version,
      (v) => gate(undefined, v, 'strict') === (v === 1 ? 'apply' : 'park') && gate(undefined, v, 'adopt') === 'apply',
    ),
  );
  assert.equal(expectedVersion(undefined), 1);
});

test('gate: feeding any permutation of 1..n through the gate with a parked set applies exactly 1..n in order', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 40 }).chain((n) =>
        fc.shuffledSubarray(
          [...Array(n).keys()].map((i) => i + 1),
          { minLength: n, maxLength: n },
        ),
      ),
      fc.array(fc.integer({ min: 1, max: 40 }), { maxLength: 10 }),
      (order, redeliveries) => {
        let last: number | undefined;
        const parked = new Set<number>();
        const applied: number[] = [];
        const n = order.length;
        for (const v of [...order, ...redeliveries.map((r) => ((r - 1) % n) + 1)]) {
          const d = gate(last, v, 'strict');
          if (d === 'park') parked.add(v);
          if (d !== 'apply') continue;
          applied.push(v);
          last = v;
          while (parked.has(last + 1)) {
            parked.delete(last + 1);
            last++;
            applied.push(last);
          }
        }
        assert.deepEqual(
          applied,
          [...Array(n).keys()].map((i) => i + 1),
        );
        // Redelivered versions are ignored; nothing stays parked.
        return parked.size === 0;
      },
    ),
  );
});
