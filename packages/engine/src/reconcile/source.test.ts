import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../errors.ts';
import { defineParticipantRecords } from './source.ts';

test('participant records name the steps they cover: a registration without steps is refused, saying what to pass', () => {
  for (const steps of [undefined, [], ['reserve', ''], 'reserve'] as const) {
    assert.throws(
      () => defineParticipantRecords({ sagaType: 'order-fulfilment', steps } as never),
      (error: unknown) =>
        error instanceof ConfigError &&
        error.code === 'config_invalid' &&
        /participant records of order-fulfilment/.test(error.message) &&
        /steps: \[/.test(error.message),
    );
  }
  assert.deepEqual(defineParticipantRecords({ sagaType: 'order-fulfilment', steps: ['reserve', 'charge'] }).steps, [
    'reserve',
    'charge',
  ]);
});
