import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../errors.ts';
import { defaultRelayOptions, resolveRelayOptions } from './options.ts';

test('relay options: a partial backoff keeps the other default; the result is whole', () => {
  const o = resolveRelayOptions({ backoff: { capMs: 60_000 } });
  assert.deepEqual(o.backoff, { ...defaultRelayOptions.backoff, capMs: 60_000 });
  assert.equal(o.batchSize, defaultRelayOptions.batchSize);
});

test('relay options: a backoff whose cap is below its base, or not a positive integer, is refused by name', () => {
  for (const backoff of [{ baseMs: 1000, capMs: 999 }, { baseMs: 0 }, { baseMs: 1.5 }]) {
    assert.throws(
      () => resolveRelayOptions({ backoff }),
      (e: unknown) => e instanceof ConfigError && /relay backoff must have baseMs/.test(e.message),
      JSON.stringify(backoff),
    );
  }
});
