import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isConnectionLost } from './connection-lost.ts';

const coded = (code: string, extra: object = {}) => Object.assign(new Error(code), { code }, extra);
const postgresError = (code: string) => Object.assign(new Error('canceled'), { name: 'PostgresError', code });

test('a lost or silent database is told apart from a statement that failed', () => {
  const cases: Array<[string, unknown, boolean]> = [
    ['connection destroyed', coded('CONNECTION_DESTROYED'), true],
    ['connect timeout', coded('CONNECT_TIMEOUT'), true],
    ['refused', coded('ECONNREFUSED'), true],
    ['cancel unanswered', coded('CANCEL_UNANSWERED'), true],
    ['query timeout, the cancel unanswered', coded('QUERY_TIMEOUT', { cause: coded('CANCEL_UNANSWERED') }), true],
    ['query timeout waiting for a connection', coded('QUERY_TIMEOUT'), true],
    [
      'query timeout the server canceled (it answers)',
      coded('QUERY_TIMEOUT', { cause: postgresError('57014') }),
      false,
    ],
    ['a wrapped lost connection', new Error('repair failed', { cause: coded('ECONNRESET') }), true],
    ['a unique violation', postgresError('23505'), false],
    ['a plain error', new Error('boom'), false],
    ['not an error', 'ECONNRESET', false],
    ['nothing', undefined, false],
  ];
  for (const [what, error, lost] of cases) assert.equal(isConnectionLost(error), lost, what);
});

test('a cycle of causes ends', () => {
  const a: Error & { cause?: unknown } = new Error('a');
  const b = new Error('b', { cause: a });
  a.cause = b;
  assert.equal(isConnectionLost(a), false);
});
