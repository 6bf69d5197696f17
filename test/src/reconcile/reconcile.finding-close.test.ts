import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Handler } from '@postbox/engine';
import { defineParticipantRecords, listFindings, Reconciler, type StoredFinding } from '@postbox/engine/reconcile';
import { defineSaga, participant, readSaga, SagaOrchestrator, sagaReplyHandler } from '@postbox/engine/saga';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { deliverPending } from './fixtures.ts';

// When a run closes a finding: only when it re-examined the finding's key and found it healthy. A key the run
// could not judge — its subject moved within the grace window, so the scan left it alone — stays as it was (it
// is not "resolved", to read as a repair that did not take when it is seen again), and an operator's `manual`
// verdict survives the runs that see the finding again. Shown on saga-step-mismatch (grace: 60 s): a saga holds
// its reserve step succeeded while the inventory's record says it was fenced.
let db: TestDatabase;

const saga = defineSaga<{ orderId: string }>({
  type: 'fc-order',
  version: 1,
  replyTopic: 'fc.replies',
  steps: [
    {
      name: 'reserve',
      topic: 'fc.inventory',
      command: (d) => ({ type: 'inventory.reserve', data: d }),
      success: ['inventory.reserved'],
      failure: [],
      compensate: (d) => ({ type: 'inventory.release', data: d }),
    },
    {
      name: 'charge',
      topic: 'fc.payments',
      command: (d) => ({ type: 'payments.charge', data: d }),
      success: ['payments.charged'],
      failure: [],
      compensate: (d) => ({ type: 'payments.refund', data: d }),
    },
    {
      name: 'ship',
      topic: 'fc.shipping',
      command: (d) => ({ type: 'shipping.ship', data: d }),
      success: ['shipping.shipped'],
      failure: [],
    },
  ],
});
const sagas = new SagaOrchestrator([saga]);
const applies = (type: string) =>
  participant({
    name: type.split('.')[0]!,
    apply: async () => ({ applied: true, type }),
    compensate: async () => 'compensated',
  });
const handlers: Record<string, Handler> = {
  'fc.inventory': applies('inventory.reserved'),
  'fc.payments': applies('payments.charged'),
  'fc.replies': sagaReplyHandler(sagas),
};
const deliver = (topics: string[]) => deliverPending(db.sql, topics, (t) => handlers[t]!);
let reconciler: Reconciler;

before(async () => {
  db = await freshDatabase();
  await sagas.register(db.sql);
  reconciler = new Reconciler({
    sql: db.sql,
    sagas,
    participants: [defineParticipantRecords({ sagaType: 'fc-order', steps: ['reserve', 'charge', 'ship'] })],
  });
});
after(async () => {
  await db?.drop();
});

/** A running saga (reserve succeeded, charge out) whose reserve record the inventory fenced; unmoved for 10 min. */
async function mismatchedSaga(orderId: string): Promise<string> {
  const { sagaId } = await db.sql.begin((tx) => sagas.start(tx, saga, { businessKey: orderId, data: { orderId } }));
  await deliver(['fc.inventory']);
  await deliver(['fc.replies']);
  await db.sql`UPDATE saga_participation SET status = 'fenced' WHERE step_key = ${`${sagaId}:reserve`}`;
  await settle(sagaId);
  return sagaId;
}

/** The saga has not moved for ten minutes: outside the 60 s grace window. */
async function settle(sagaId: string): Promise<void> {
  await db.sql`UPDATE saga_instance SET updated_at = now() - interval '10 minutes' WHERE saga_id = ${sagaId}`;
}

async function findingOf(sagaId: string): Promise<StoredFinding> {
  const [f] = await listFindings(db.sql, { check: 'saga-step-mismatch', key: `${sagaId}:reserve` }, 10, null);
  return f!;
}

test('a finding whose saga moved within the grace window stays open; once re-examined and healthy it is resolved', async () => {
  const sagaId = await mismatchedSaga('o-1');
  await reconciler.run('saga-step-mismatch', { actor: 'test' });
  assert.deepEqual(
    [(await findingOf(sagaId)).kind, (await findingOf(sagaId)).status],
    ['succeeded_not_applied', 'open'],
  );

  // The charge's reply arrives: the saga moved a moment ago, the next run's scan leaves it alone (grace).
  await deliver(['fc.payments']);
  await deliver(['fc.replies']);
  assert.deepEqual((await readSaga(db.sql, sagaId))!.steps, ['succeeded', 'succeeded', 'running']);
  const within = await reconciler.run('saga-step-mismatch', { actor: 'test' });
  assert.equal(within.counts.closed, 0);
  assert.equal((await findingOf(sagaId)).status, 'open', 'not judged this run: it stays open');

  // The inventory's record is put right; the saga is settled again: re-examined, healthy, resolved.
  await db.sql`UPDATE saga_participation SET status = 'applied' WHERE step_key = ${`${sagaId}:reserve`}`;
  await settle(sagaId);
  const healthy = await reconciler.run('saga-step-mismatch', { actor: 'test' });
  assert.equal(healthy.counts.closed, 1);
  const closed = await findingOf(sagaId);
  assert.equal(closed.status, 'resolved');
  assert.ok(closed.closedAt);
});

test("an operator's manual verdict is not reset to open by the next run that sees the finding again", async () => {
  const sagaId = await mismatchedSaga('o-2');
  await reconciler.run('saga-step-mismatch', { actor: 'test' });
  const found = await findingOf(sagaId);
  assert.equal(found.status, 'open');
  // An operator takes it over (apply the step by hand, then close): the finding is theirs now, their verdict
  // recorded as a repair pass records one.
  const verdict = { detail: 'the reservation is redone by hand', actor: 'ops', at: new Date().toISOString() };
  await db.sql`
    UPDATE reconciliation_finding SET status = 'manual', repair = ${db.sql.json(verdict)}
    WHERE finding_id = ${found.id}`;

  const again = await reconciler.run('saga-step-mismatch', { actor: 'test' });
  assert.ok(again.counts.found >= 1);
  const seen = await findingOf(sagaId);
  assert.deepEqual([seen.status, seen.lastRunId, seen.repair?.detail], ['manual', again.runId, verdict.detail]);
  const pass = await reconciler.repair('saga-step-mismatch', {
    actor: 'ops',
    reason: 'check',
    dryRun: false,
    ids: [found.id],
  });
  assert.equal(pass.items.length, 0, 'a manual finding is not a repair pass to take');
  assert.equal((await readSaga(db.sql, sagaId))!.status, 'running');
});
