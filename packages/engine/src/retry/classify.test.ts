import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { BrokerError, EnvelopeValidationError, PermanentError } from '../errors.ts';
import { classify, classifySqlState, commitOutcomeUnknown } from './classify.ts';

const pg = (code: string) => Object.assign(new Error(`pg ${code}`), { name: 'PostgresError', code });

test('classifier table: SQLSTATEs, network errors, broker errors as adapters map them, typed errors', () => {
  const table: Array<[unknown, string, string, boolean]> = [
    [pg('40001'), 'transient', 'pg_40001', true],
    [pg('40P01'), 'transient', 'pg_40p01', true],
    [pg('55P03'), 'transient', 'pg_55p03', false],
    [pg('08006'), 'transient', 'pg_08006', false],
    [pg('57P01'), 'transient', 'pg_57p01', false],
    [pg('53100'), 'transient', 'pg_53100', false],
    [pg('23505'), 'permanent', 'pg_23505', false],
    [pg('22P02'), 'permanent', 'pg_22p02', false],
    [pg('42P01'), 'permanent', 'pg_42p01', false],
    [Object.assign(new Error('reset'), { code: 'ECONNRESET' }), 'transient', 'network_econnreset', false],
    [
      Object.assign(new Error('closed'), { code: 'CONNECTION_CLOSED' }),
      'transient',
      'network_connection_closed',
      false,
    ],
    [
      Object.assign(new Error('rolled back'), { code: 'TRANSACTION_ROLLED_BACK' }),
      'transient',
      'pg_transaction_rolled_back',
      false,
    ],
    [Object.assign(new Error('ended'), { code: 'UNSAFE_TRANSACTION' }), 'permanent', 'pg_unsafe_transaction', false],
    [new BrokerError('kafka_connectionerror', 'transient', 'down'), 'transient', 'kafka_connectionerror', false],
    [new BrokerError('nats_timeout', 'unknown', 'slow'), 'unknown', 'nats_timeout', false],
    [
      new BrokerError('kafka_message_too_large', 'permanent', 'too large'),
      'permanent',
      'kafka_message_too_large',
      false,
    ],
    [
      new Error('wrapped', { cause: new BrokerError('amqp_returned', 'permanent', 'no route') }),
      'permanent',
      'amqp_returned',
      false,
    ],
    [new PermanentError('no such customer', { code: 'customer_missing' }), 'permanent', 'customer_missing', false],
    [new EnvelopeValidationError([{ path: 'data', rule: 'is required' }]), 'permanent', 'envelope_invalid', false],
    [new Error('downstream said 503'), 'transient', 'error', false],
    [new Error('wrapped', { cause: pg('40001') }), 'transient', 'pg_40001', true],
  ];
  for (const [error, kind, code, immediate] of table) {
    assert.deepEqual(classify(error), { kind, code, immediate }, String(error));
  }
});

test('property: every SQLSTATE gets one class; only 40001/40P01 retry immediately; class 23 is never retried', () => {
  const sqlstate = fc.stringMatching(/^[0-9A-Z]{5}$/);
  fc.assert(
    fc.property(sqlstate, (s) => {
      const c = classifySqlState(s);
      assert.ok(c.kind === 'transient' || c.kind === 'permanent');
      assert.equal(c.immediate, s === '40001' || s === '40P01');
      if (s.startsWith('23')) assert.equal(c.kind, 'permanent');
      if (s.startsWith('08')) assert.equal(c.kind, 'transient');
      assert.equal(c.code, `pg_${s.toLowerCase()}`);
    }),
  );
});

test('property: classify never throws and is deterministic for arbitrary thrown values', () => {
  fc.assert(
    fc.property(fc.anything(), (v) => {
      assert.deepEqual(classify(v), classify(v));
    }),
  );
});

test('a broken connection at commit is an unknown outcome; a constraint violation is not', () => {
  assert.equal(commitOutcomeUnknown(Object.assign(new Error('x'), { code: 'CONNECTION_CLOSED' })), true);
  assert.equal(commitOutcomeUnknown(pg('08006')), true);
  assert.equal(commitOutcomeUnknown(pg('23505')), false);
});
