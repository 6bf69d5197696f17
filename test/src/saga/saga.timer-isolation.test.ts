import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { listFindings, Reconciler } from '@postbox/engine/reconcile';
import { defineSaga, readSaga, SagaOrchestrator, SagaTimerRunner, sagaHistory } from '@postbox/engine/saga';
import { freshDatabase, type TestDatabase } from '../support/database.ts';

// One saga whose timer transition throws must not stop the others' timers, in the timer runner and in the
// reconciler's timer repair: a permanent failure (here the step's query builder throws on the saga's data) freezes
// that saga for an operator, a transient one (here the row refuses the transition with lock_not_available) pushes
// its timer back; the sagas due after it fire.
let db: TestDatabase;

interface Data {
  orderId: string;
  bad?: boolean;
}

const definition = defineSaga<Data>({
  type: 'iso-order',
  version: 1,
  replyTopic: 'iso.replies',
  steps: [
    {
      name: 'reserve',
      topic: 'iso.inventory',
      timeoutMs: 1000,
      command: (d) => ({ type: 'inventory.reserve', data: { orderId: d.orderId } }),
      query: (d) => {
        if (d.bad) throw new Error(`no query for order ${d.orderId}`);
        return { type: 'inventory.status', data: { orderId: d.orderId } };
      },
      success: ['inventory.reserved'],
      failure: ['inventory.out_of_stock'],
    },
  ],
});
const sagas = new SagaOrchestrator([definition]);

before(async () => {
  db = await freshDatabase();
  await sagas.register(db.sql);
});
after(async () => {
  await db.drop();
});

/** Starts sagas one after another at `t0`, `t0 + 1` ms, … (the first is the oldest due). */
async function start(keys: Array<{ key: string; bad?: boolean }>, t0: number): Promise<string[]> {
  const ids: string[] = [];
  for (const [i, k] of keys.entries()) {
    const { sagaId } = await db.sql.begin((tx) =>
      sagas.start(tx, definition, { businessKey: k.key, data: { orderId: k.key, bad: k.bad }, now: t0 + i }),
    );
    ids.push(sagaId);
  }
  return ids;
}

async function statuses(ids: string[]): Promise<string[]> {
  return Promise.all(ids.map(async (id) => (await readSaga(db.sql, id))!.status));
}

test('timer runner: a saga whose transition throws is frozen with its reason; the sagas due after it fire', async () => {
  const t0 = Date.now() - 60_000;
  const [bad, ...healthy] = await start(
    [{ key: 'r-bad', bad: true }, { key: 'r-1' }, { key: 'r-2' }, { key: 'r-3' }],
    t0,
  );
  const runner = new SagaTimerRunner(db.sql, sagas, { batch: 10 });
  await runner.fireDue(t0 + 5000).catch(() => {});

  assert.deepEqual(await statuses(healthy), ['resolving', 'resolving', 'resolving'], 'the healthy sagas fired');
  const frozen = (await readSaga(db.sql, bad!))!;
  assert.deepEqual(
    [frozen.status, frozen.attentionReason, frozen.version, frozen.dueAt],
    ['needs_attention', 'transition_failed', 2, null],
  );
  const last = (await sagaHistory(db.sql, bad!)).at(-1)!;
  assert.deepEqual([last.version, last.from, last.to, last.step], [2, 'running', 'needs_attention', 'reserve']);
  assert.match(last.cause, /^transition_failed: saga_transition_failed: .*no query for order r-bad/);
  const sent = await db.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM message_outbox WHERE aggregate_id = ${`saga:${bad}:reserve`}`;
  assert.equal(sent[0]!.n, 1, 'nothing sent by the failed transition (only the first command)');

  // Frozen, it is no longer due: a later look leaves it as it is.
  await runner.fireDue(t0 + 10_000);
  assert.equal((await readSaga(db.sql, bad!))!.version, 2);
});

test('timer runner: a transient failure pushes the saga’s due_at back (backoff) and the others still fire', async () => {
  const t0 = Date.now() - 30_000;
  const [flaky, ...healthy] = await start([{ key: 't-flaky' }, { key: 't-1' }, { key: 't-2' }], t0);
  // The flaky saga's row refuses every transition (a version bump) as a lock that cannot be had: transient.
  await db.sql.unsafe(`
    CREATE FUNCTION test_refuse_transition() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.saga_id = '${flaky}' AND NEW.version <> OLD.version THEN
        RAISE EXCEPTION 'test: row busy' USING ERRCODE = '55P03';
      END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER test_refuse_transition BEFORE UPDATE ON saga_instance
      FOR EACH ROW EXECUTE FUNCTION test_refuse_transition();`);
  try {
    const before = (await readSaga(db.sql, flaky!))!;
    const runner = new SagaTimerRunner(db.sql, sagas, { batch: 10 });
    const now = t0 + 5000;
    await runner.fireDue(now).catch(() => {});

    assert.deepEqual(await statuses(healthy), ['resolving', 'resolving'], 'the healthy sagas fired');
    const after = (await readSaga(db.sql, flaky!))!;
    assert.deepEqual([after.status, after.version], ['running', before.version], 'not moved, not frozen');
    assert.ok(
      after.dueAt! >= now && after.dueAt! > before.dueAt!,
      `due_at moved later (${before.dueAt} → ${after.dueAt})`,
    );
    const [row] = await db.sql<{ timer_failures: number }[]>`
      SELECT timer_failures FROM saga_instance WHERE saga_id = ${flaky!}`;
    assert.equal(row!.timer_failures, 1);
    assert.equal((await sagaHistory(db.sql, flaky!)).length, 1, 'no history line for a deferral');
  } finally {
    await db.sql.unsafe('DROP TRIGGER test_refuse_transition ON saga_instance; DROP FUNCTION test_refuse_transition()');
  }
  // Once the row takes transitions again, the deferred timer fires and the failure count is reset.
  const later = t0 + 5000 + 200_000;
  await new SagaTimerRunner(db.sql, sagas).fireDue(later);
  assert.equal((await readSaga(db.sql, flaky!))!.status, 'resolving');
  const [row] = await db.sql<
    { timer_failures: number }[]
  >`SELECT timer_failures FROM saga_instance WHERE saga_id = ${flaky!}`;
  assert.equal(row!.timer_failures, 0);
});

test('reconciler timer repair: the bad saga is frozen (manual), the pass goes on and fires the others', async () => {
  await db.sql`DELETE FROM saga_history`;
  await db.sql`DELETE FROM saga_instance`;
  const t0 = Date.now();
  const [bad, ...healthy] = await start([{ key: 'c-bad', bad: true }, { key: 'c-1' }, { key: 'c-2' }], t0);
  // No timer runner: two minutes later every timer is overdue past the check's grace.
  const reconciler = new Reconciler({ sql: db.sql, sagas, clock: () => t0 + 120_000 });
  assert.equal((await reconciler.run('saga-timer-unfired', { actor: 'test' })).counts.found, 3);
  const repaired = await reconciler.repair('saga-timer-unfired', {
    actor: 'ops',
    reason: 'timer runner down',
    dryRun: false,
  });
  assert.deepEqual(
    [repaired.status, repaired.counts.repaired, repaired.counts.manual, repaired.counts.failed],
    ['finished', 2, 1, 0],
  );
  assert.deepEqual(await statuses(healthy), ['resolving', 'resolving']);
  const frozen = (await readSaga(db.sql, bad!))!;
  assert.deepEqual([frozen.status, frozen.attentionReason], ['needs_attention', 'transition_failed']);
  assert.equal((await sagaHistory(db.sql, bad!)).at(-1)!.to, 'needs_attention');
  const findings = await listFindings(db.sql, { check: 'saga-timer-unfired' }, 10, null);
  assert.equal(findings.find((f) => f.key === bad)!.status, 'manual');
});

test("timer runner: a permanent failure that is not the saga's own (a refused write) defers it, never freezes it", async () => {
  await db.sql`DELETE FROM saga_history`;
  await db.sql`DELETE FROM saga_instance`;
  const t0 = Date.now() - 30_000;
  const [one, two] = await start([{ key: 'p-1' }, { key: 'p-2' }], t0);
  // What a deploy's missing grant looks like to every saga: the command the transition sends is refused (42501).
  await db.sql.unsafe(`
    CREATE FUNCTION test_refuse_command() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION 'test: permission denied for table message_outbox' USING ERRCODE = '42501';
    END $$;
    CREATE TRIGGER test_refuse_command BEFORE INSERT ON message_outbox
      FOR EACH STATEMENT EXECUTE FUNCTION test_refuse_command();`);
  try {
    await new SagaTimerRunner(db.sql, sagas, { batch: 10 }).fireDue(t0 + 5000).catch(() => {});
    for (const id of [one!, two!]) {
      const s = (await readSaga(db.sql, id))!;
      assert.deepEqual([s.status, s.attentionReason], ['running', null], `saga ${id} is not frozen for a grant`);
      assert.ok(s.dueAt! >= t0 + 5000, `saga ${id}'s timer is pushed back past the look`);
    }
  } finally {
    await db.sql.unsafe('DROP TRIGGER test_refuse_command ON message_outbox; DROP FUNCTION test_refuse_command()');
  }
  // The grant back, every saga goes on.
  await new SagaTimerRunner(db.sql, sagas).fireDue(t0 + 5000 + 200_000);
  assert.deepEqual(await statuses([one!, two!]), ['resolving', 'resolving']);
});
