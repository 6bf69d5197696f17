import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Envelope, Sql, Tx } from '@postbox/engine';
import { defineParticipantRecords, listFindings, Reconciler } from '@postbox/engine/reconcile';
import { defineSaga, participant, readSaga, SagaOrchestrator, sagaReplyHandler } from '@postbox/engine/saga';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { deliverPending } from './fixtures.ts';

// A saga step the saga holds as succeeded while its participant says it never applied it (its database was
// restored from a backup taken before the reservation: the record and the effect are gone). The participants
// share the database, so the check reads their records; the repair compensates the saga through its own action
// (SagaOrchestrator.act): the saga cannot go on forward on a step that did not happen, it never re-sends a step
// blind, and resolve only decides the step whose command is out now. Commands and replies are handed to the
// participants and the orchestrator as their consumers would (no broker needed to show the decision).
let db: TestDatabase;

const saga = defineSaga<{ orderId: string }>({
  type: 'rc-order',
  version: 1,
  replyTopic: 'rc.replies',
  steps: [
    {
      name: 'reserve',
      topic: 'rc.inventory',
      command: (d) => ({ type: 'inventory.reserve', data: d }),
      success: ['inventory.reserved'],
      failure: [],
      compensate: (d) => ({ type: 'inventory.release', data: d }),
    },
    {
      name: 'charge',
      topic: 'rc.payments',
      command: (d) => ({ type: 'payments.charge', data: d }),
      success: ['payments.charged'],
      failure: ['payments.declined'],
      compensate: (d) => ({ type: 'payments.refund', data: d }),
    },
    {
      name: 'ship',
      topic: 'rc.shipping',
      pivot: true,
      command: (d) => ({ type: 'shipping.ship', data: d }),
      success: ['shipping.shipped'],
      failure: [],
    },
  ],
});
const sagas = new SagaOrchestrator([saga]);
const effect = (tx: Tx, who: string, cmd: Envelope, action: string) =>
  tx`INSERT INTO rc_effect (participant, order_id, action) VALUES (${who}, ${(cmd.data as { orderId: string }).orderId}, ${action})`;
const handlers: Record<string, ReturnType<typeof participant>> = {
  'rc.inventory': participant({
    name: 'inventory',
    apply: async (cmd, tx) => (
      await effect(tx, 'inventory', cmd, 'reserve'), { applied: true, type: 'inventory.reserved' }
    ),
    compensate: async (cmd, tx) => (await effect(tx, 'inventory', cmd, 'release'), 'compensated'),
  }),
  'rc.payments': participant({
    name: 'payments',
    apply: async (cmd, tx) => (
      await effect(tx, 'payments', cmd, 'charge'), { applied: true, type: 'payments.charged' }
    ),
    // A refund the payment provider refuses (order o-refuse): the saga freezes in needs_attention.
    compensate: async (cmd, tx) =>
      (cmd.data as { orderId: string }).orderId === 'o-refuse'
        ? 'refused'
        : (await effect(tx, 'payments', cmd, 'refund'), 'compensated'),
  }),
  'rc.shipping': participant({ name: 'shipping', apply: async () => ({ applied: true, type: 'shipping.shipped' }) }),
};
const onReply = sagaReplyHandler(sagas);

before(async () => {
  db = await freshDatabase();
  await db.sql`CREATE TABLE rc_effect (participant text NOT NULL, order_id text NOT NULL, action text NOT NULL)`;
  await sagas.register(db.sql);
});
after(async () => {
  await db?.drop();
});

/** Delivers pending outbox events of the given topics (commands to participants, replies to the orchestrator). */
const deliver = (sql: Sql, topics: string[]) =>
  deliverPending(sql, topics, (topic) => (topic === 'rc.replies' ? onReply : handlers[topic]!));

function mismatchReconciler(): Reconciler {
  return new Reconciler({
    sql: db.sql,
    sagas,
    participants: [defineParticipantRecords({ sagaType: 'rc-order', steps: ['reserve', 'charge', 'ship'] })],
    options: { graceMs: { 'saga-step-mismatch': 0 } },
  });
}

async function expectOneFinding(reconciler: Reconciler): Promise<void> {
  const run = await reconciler.run('saga-step-mismatch', { actor: 'test' });
  assert.deepEqual([run.status, run.counts.found], ['finished', 1]);
}

async function pump(): Promise<void> {
  while ((await deliver(db.sql, ['rc.inventory', 'rc.payments', 'rc.shipping', 'rc.replies'])) > 0);
}

test('a step succeeded in the saga but not applied at its participant: found, compensated through the saga, then nothing found', async () => {
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, saga, { businessKey: 'o-1', data: { orderId: 'o-1' } }),
  );
  await deliver(db.sql, ['rc.inventory']);
  await deliver(db.sql, ['rc.replies']);
  assert.deepEqual((await readSaga(db.sql, sagaId))!.steps, ['succeeded', 'running', 'pending']);
  // The inventory database comes back from a backup taken before the reservation.
  await db.sql`DELETE FROM saga_participation WHERE step_key = ${`${sagaId}:reserve`}`;
  await db.sql`DELETE FROM rc_effect WHERE participant = 'inventory'`;

  const reconciler = mismatchReconciler();
  await expectOneFinding(reconciler);
  const [finding] = await listFindings(db.sql, { check: 'saga-step-mismatch' }, 10, null);
  assert.deepEqual(
    [finding!.key, finding!.kind, finding!.status],
    [`${sagaId}:reserve`, 'succeeded_not_applied', 'open'],
  );
  assert.deepEqual(finding!.observed, {
    saga: 'running',
    step: 'succeeded',
    participant: 'never seen',
    pivotPassed: false,
  });

  const dry = await reconciler.repair('saga-step-mismatch', { actor: 'ops', reason: 'inventory restored from backup' });
  assert.deepEqual(
    dry.items.map((i) => [i.outcome, i.action]),
    [['would_repair', `compensate saga ${sagaId}`]],
  );
  assert.equal((await readSaga(db.sql, sagaId))!.status, 'running', 'the dry run changed nothing');

  const done = await reconciler.repair('saga-step-mismatch', {
    actor: 'ops',
    reason: 'inventory restored from backup',
    dryRun: false,
  });
  assert.deepEqual([done.counts.repaired, done.items[0]!.detail], [1, 'running → compensating']);
  await pump();

  const ended = await readSaga(db.sql, sagaId);
  assert.equal(ended!.status, 'compensated');
  assert.deepEqual(ended!.steps, ['compensated', 'compensated', 'pending']);
  // The charge that was on its way applied and was refunded; the reservation that never was is fenced, not released.
  const effects = await db.sql<{ e: string }[]>`SELECT participant || ':' || action AS e FROM rc_effect ORDER BY 1`;
  assert.deepEqual(
    effects.map((r) => r.e),
    ['payments:charge', 'payments:refund'],
  );
  const records = await db.sql<{ step_key: string; status: string }[]>`
    SELECT step_key, status FROM saga_participation ORDER BY step_key`;
  assert.deepEqual(
    records.map((r) => [r.step_key.split(':')[1], r.status]),
    [
      ['charge', 'compensated'],
      ['reserve', 'fenced'],
    ],
  );

  assert.equal((await reconciler.run('saga-step-mismatch', { actor: 'test' })).counts.found, 0);
  const [closed] = await listFindings(db.sql, { check: 'saga-step-mismatch' }, 10, null);
  assert.equal(closed!.status, 'repaired');
  const audit = await db.sql<{ action: string; actor: string }[]>`
    SELECT action, actor FROM operator_audit ORDER BY audit_id`;
  assert.deepEqual(
    audit.map((a) => [a.action, a.actor]),
    [
      ['reconcile.dry_run', 'ops'],
      ['saga.compensate', 'ops'],
      ['reconcile.compensate_saga', 'ops'],
    ],
  );
});

test('a compensated saga whose participant still holds the step applied: found, left to an operator with the saga unchanged', async () => {
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, saga, { businessKey: 'o-2', data: { orderId: 'o-2' } }),
  );
  await deliver(db.sql, ['rc.inventory']);
  await deliver(db.sql, ['rc.replies']);
  await db.sql.begin((tx) =>
    sagas.act(tx, sagaId, { kind: 'compensate' }, { actor: 'ops', reason: 'customer cancelled' }),
  );
  await pump();
  assert.equal((await readSaga(db.sql, sagaId))!.status, 'compensated');
  // The inventory database comes back from a backup taken before the release: its record says reserved again.
  await db.sql`UPDATE saga_participation SET status = 'applied' WHERE step_key = ${`${sagaId}:reserve`}`;

  const reconciler = mismatchReconciler();
  await expectOneFinding(reconciler);
  const [finding] = await listFindings(db.sql, { check: 'saga-step-mismatch', status: 'manual' }, 10, null);
  assert.deepEqual(
    [finding!.key, finding!.kind, finding!.status],
    [`${sagaId}:reserve`, 'compensated_but_applied', 'manual'],
  );
  assert.deepEqual(finding!.observed, {
    saga: 'compensated',
    step: 'compensated',
    participant: 'applied',
    pivotPassed: false,
  });
  const versionBefore = (await readSaga(db.sql, sagaId))!.version;
  // A manual finding is not a repair's to take: the pass plans nothing.
  const done = await reconciler.repair('saga-step-mismatch', { actor: 'ops', reason: 'backup restore', dryRun: false });
  assert.deepEqual([done.counts.planned, done.items.length], [0, 0]);
  const after = await readSaga(db.sql, sagaId);
  assert.deepEqual([after!.status, after!.version], ['compensated', versionBefore], 'the saga is not touched');
});

test('a saga frozen in needs_attention past the SLA: found by saga-overdue with its reason, only an operator decides', async () => {
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, saga, { businessKey: 'o-refuse', data: { orderId: 'o-refuse' } }),
  );
  await deliver(db.sql, ['rc.inventory']);
  await deliver(db.sql, ['rc.replies']);
  // Charged; the reply is still on its way when an operator cancels (before the pivot's command goes out).
  await deliver(db.sql, ['rc.payments']);
  await db.sql.begin((tx) => sagas.act(tx, sagaId, { kind: 'compensate' }, { actor: 'ops', reason: 'fraud check' }));
  await pump();
  const frozen = await readSaga(db.sql, sagaId);
  assert.deepEqual([frozen!.status, frozen!.attentionReason], ['needs_attention', 'compensation_refused']);

  const sla = 3_600_000;
  const reconciler = new Reconciler({ sql: db.sql, sagas, options: { graceMs: { 'saga-overdue': sla } } });
  assert.equal((await reconciler.run('saga-overdue', { actor: 'test' })).counts.found, 0, 'within the SLA');
  // An hour and a minute later, nobody has decided.
  await db.sql`UPDATE saga_instance SET updated_at = now() - interval '61 minutes' WHERE saga_id = ${sagaId}`;
  const run = await reconciler.run('saga-overdue', { actor: 'test' });
  assert.deepEqual([run.status, run.counts.found], ['finished', 1]);
  const [finding] = await listFindings(db.sql, { check: 'saga-overdue' }, 10, null);
  assert.deepEqual(
    [finding!.key, finding!.kind, finding!.status, finding!.observed.status, finding!.observed.attentionReason],
    [sagaId, 'needs_attention', 'manual', 'needs_attention', 'compensation_refused'],
  );
  const done = await reconciler.repair('saga-overdue', { actor: 'ops', reason: 'look', dryRun: false });
  assert.deepEqual([done.counts.planned, done.items.length], [0, 0]);
  // The operator decides (close it by hand); the next run closes the finding.
  await db.sql.begin((tx) =>
    sagas.act(tx, sagaId, { kind: 'close' }, { actor: 'ops', reason: 'refund made by hand at the provider' }),
  );
  assert.equal((await reconciler.run('saga-overdue', { actor: 'test' })).counts.found, 0);
  const [closed] = await listFindings(db.sql, { check: 'saga-overdue' }, 10, null);
  assert.equal(closed!.status, 'resolved');
  assert.equal((await readSaga(db.sql, sagaId))!.status, 'closed_manually');
});
