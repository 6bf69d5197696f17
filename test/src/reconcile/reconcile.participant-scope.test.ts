import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Handler } from '@postbox/engine';
import { defineParticipantRecords, listFindings, Reconciler } from '@postbox/engine/reconcile';
import { defineSaga, participant, readSaga, SagaOrchestrator, sagaReplyHandler } from '@postbox/engine/saga';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { deliverPending } from './fixtures.ts';

// A saga whose steps are served by participants in different places: inventory keeps its step records in this
// database, payments in its own (here: its record is not in this database). The registration names the steps it
// covers; a step whose record lives elsewhere must never read as "never applied", and a finding about it must
// never lead a repair to compensate a healthy saga.
let db: TestDatabase;

const saga = defineSaga<{ orderId: string }>({
  type: 'ps-order',
  version: 1,
  replyTopic: 'ps.replies',
  steps: [
    {
      name: 'reserve',
      topic: 'ps.inventory',
      command: (d) => ({ type: 'inventory.reserve', data: d }),
      success: ['inventory.reserved'],
      failure: [],
      compensate: (d) => ({ type: 'inventory.release', data: d }),
    },
    {
      name: 'charge',
      topic: 'ps.payments',
      command: (d) => ({ type: 'payments.charge', data: d }),
      success: ['payments.charged'],
      failure: ['payments.declined'],
      compensate: (d) => ({ type: 'payments.refund', data: d }),
    },
    {
      name: 'ship',
      topic: 'ps.shipping',
      command: (d) => ({ type: 'shipping.ship', data: d }),
      success: ['shipping.shipped'],
      failure: [],
    },
  ],
});
const sagas = new SagaOrchestrator([saga]);
const handlers: Record<string, Handler> = {
  'ps.inventory': participant({
    name: 'inventory',
    apply: async () => ({ applied: true, type: 'inventory.reserved' }),
    compensate: async () => 'compensated',
  }),
  'ps.payments': participant({
    name: 'payments',
    apply: async () => ({ applied: true, type: 'payments.charged' }),
    compensate: async () => 'compensated',
  }),
  'ps.replies': sagaReplyHandler(sagas),
};
const deliver = (topics: string[]) => deliverPending(db.sql, topics, (t) => handlers[t]!);

before(async () => {
  db = await freshDatabase();
  await sagas.register(db.sql);
});
after(async () => {
  await db?.drop();
});

/** A saga whose reserve and charge succeeded; the payments service keeps its record in its own database. */
async function chargedSaga(orderId: string): Promise<string> {
  const { sagaId } = await db.sql.begin((tx) => sagas.start(tx, saga, { businessKey: orderId, data: { orderId } }));
  await deliver(['ps.inventory']);
  await deliver(['ps.replies']);
  await deliver(['ps.payments']);
  await deliver(['ps.replies']);
  await db.sql`DELETE FROM saga_participation WHERE step_key = ${`${sagaId}:charge`}`;
  assert.deepEqual((await readSaga(db.sql, sagaId))!.steps, ['succeeded', 'succeeded', 'running']);
  return sagaId;
}

test('a step served by a participant the registration does not cover: no "never applied" finding', async () => {
  assert.throws(
    () => defineParticipantRecords({ sagaType: 'ps-order' } as never),
    /participant records of ps-order: name the steps/,
    'a registration must say which steps record here',
  );
  const sagaId = await chargedSaga('o-1');
  const reconciler = new Reconciler({
    sql: db.sql,
    sagas,
    participants: [defineParticipantRecords({ sagaType: 'ps-order', steps: ['reserve'] })],
    options: { graceMs: { 'saga-step-mismatch': 0 } },
  });
  const run = await reconciler.run('saga-step-mismatch', { actor: 'test' });
  assert.deepEqual([run.status, run.counts.scanned, run.counts.found], ['finished', 1, 0]);
  assert.equal((await listFindings(db.sql, { check: 'saga-step-mismatch' }, 10, null)).length, 0);
  assert.equal((await readSaga(db.sql, sagaId))!.status, 'running');
});

test('a finding about a step no longer covered (an older registration) is not acted on: the saga is not compensated', async () => {
  const sagaId = await chargedSaga('o-2');
  const wide = new Reconciler({
    sql: db.sql,
    sagas,
    participants: [defineParticipantRecords({ sagaType: 'ps-order', steps: ['reserve', 'charge'] })],
    options: { graceMs: { 'saga-step-mismatch': 0 } },
  });
  await wide.run('saga-step-mismatch', { actor: 'test' });
  const [wrong] = await listFindings(db.sql, { check: 'saga-step-mismatch', key: `${sagaId}:charge` }, 10, null);
  assert.deepEqual([wrong!.kind, wrong!.status], ['succeeded_not_applied', 'open']);

  const narrow = new Reconciler({
    sql: db.sql,
    sagas,
    participants: [defineParticipantRecords({ sagaType: 'ps-order', steps: ['reserve'] })],
    options: { graceMs: { 'saga-step-mismatch': 0 } },
  });
  await narrow.run('saga-step-mismatch', { actor: 'test' });
  await narrow.repair('saga-step-mismatch', { actor: 'ops', reason: 'payments records elsewhere', dryRun: false });
  const [finding] = await listFindings(db.sql, { check: 'saga-step-mismatch', key: `${sagaId}:charge` }, 10, null);
  assert.equal(finding!.status, 'resolved');
  const s = await readSaga(db.sql, sagaId);
  assert.deepEqual([s!.status, s!.steps], ['running', ['succeeded', 'succeeded', 'running']]);
});
