import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ConfigError } from '../../errors.ts';
import { checkSubscriberTimings, MIN_MAX_WAIT_MS } from './subscriber-options.ts';

test('the defaults and ordinary settings pass', () => {
  checkSubscriberTimings({});
  checkSubscriberTimings({ sessionTimeoutMs: 30_000, heartbeatIntervalMs: 3000, maxBytes: 2_621_440, maxWaitMs: 50 });
});

test('a fetch wait under the minimum is refused, naming the option and the value', () => {
  for (const maxWaitMs of [0, -1, MIN_MAX_WAIT_MS - 1, 12.5, Number.NaN]) {
    assert.throws(
      () => checkSubscriberTimings({ maxWaitMs }),
      (e: unknown) => e instanceof ConfigError && /maxWaitMs/.test(e.message) && e.message.includes(String(maxWaitMs)),
    );
  }
  checkSubscriberTimings({ maxWaitMs: MIN_MAX_WAIT_MS });
});

test('every size and timing must be a whole number ≥ 1', () => {
  const name = fc.constantFrom('sessionTimeoutMs', 'heartbeatIntervalMs', 'maxBytesPerPartition', 'maxBytes');
  const bad = fc.oneof(fc.integer({ max: 0 }), fc.double({ noInteger: true }), fc.constant(Number.POSITIVE_INFINITY));
  fc.assert(
    fc.property(name, bad, (n, value) => {
      assert.throws(
        () => checkSubscriberTimings({ [n]: value }),
        (e: unknown) => e instanceof ConfigError && e.message.includes(n),
      );
    }),
  );
});

test('a heartbeat not inside the session is refused', () => {
  assert.throws(() => checkSubscriberTimings({ sessionTimeoutMs: 3000, heartbeatIntervalMs: 3000 }), ConfigError);
  checkSubscriberTimings({ sessionTimeoutMs: 3001, heartbeatIntervalMs: 3000 });
  // Against the other one's default: a 2 s session alone meets the 3 s heartbeat; a 40 s heartbeat the 30 s session.
  assert.throws(() => checkSubscriberTimings({ sessionTimeoutMs: 2000 }), /heartbeatIntervalMs \(3000\)/);
  assert.throws(() => checkSubscriberTimings({ heartbeatIntervalMs: 40_000 }), /sessionTimeoutMs \(30000\)/);
  checkSubscriberTimings({ sessionTimeoutMs: 6000 });
});
