import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { enqueue } from '@postbox/engine';
import {
  defineReconcileSource,
  listFindings,
  listRuns,
  Reconciler,
  type ReconcileSource,
} from '@postbox/engine/reconcile';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { count } from './fixtures.ts';

// Batch repairs are paced, tried on a canary, stopped on an error ratio, and one run of a check runs at a time.
// Each scenario has its own business table of items whose events are missing; a re-emit command fails for the
// items marked to fail (a downstream refusing), so the stop rules have something to stop on.
let db: TestDatabase;

before(async () => {
  db = await freshDatabase();
});
after(async () => {
  await db?.drop();
});

async function items(type: string, n: number, failing: number[] = [], slowMs = 0): Promise<ReconcileSource> {
  const table = `rc_${type}`;
  await db.sql.unsafe(`CREATE TABLE ${table} (id text PRIMARY KEY, version bigint NOT NULL, fail boolean NOT NULL)`);
  for (let i = 1; i <= n; i++)
    await db.sql.unsafe(`INSERT INTO ${table} VALUES ($1, 1, $2)`, [
      `${type}-${String(i).padStart(2, '0')}`,
      failing.includes(i),
    ]);
  return defineReconcileSource({
    aggregateType: type,
    topic: `rc.${type}`,
    versions: async (sql, afterId, limit) => {
      if (slowMs > 0) await sql`SELECT pg_sleep(${slowMs / 1000})`;
      return sql.unsafe(
        `SELECT id AS aggregate_id, version FROM ${table} WHERE $1::text IS NULL OR id > $1 ORDER BY id LIMIT $2`,
        [afterId, limit],
      );
    },
    reemit: async (tx, id, version) => {
      const [row] = await tx.unsafe<{ fail: boolean }[]>(`SELECT fail FROM ${table} WHERE id = $1 FOR UPDATE`, [id]);
      if (row!.fail) throw new Error(`downstream refused ${id}`);
      await enqueue(
        tx,
        { event_type: 'Item', aggregate_id: id, aggregate_version: version, data: {} },
        { topic: `rc.${type}` },
      );
      return true;
    },
  });
}

const reconcilerOf = (source: ReconcileSource) =>
  new Reconciler({ sql: db.sql, sources: [source], options: { graceMs: { 'outbox-missing': 0 } } });

test('executed repairs start at most rate a second (their audit times show it), the canary passes, every item repaired', async () => {
  const r = reconcilerOf(await items('paced', 8));
  assert.equal((await r.run('outbox-missing', { actor: 'test' })).counts.found, 8);
  const report = await r.repair('outbox-missing', {
    actor: 'ops',
    reason: 'paced',
    dryRun: false,
    ratePerSecond: 4,
    stop: { canary: 3 },
  });
  assert.deepEqual([report.status, report.counts.repaired, report.counts.failed], ['finished', 8, 0]);
  const starts = report.items.map((i) => i.startedAt.getTime());
  for (let i = 1; i < starts.length; i++)
    assert.ok(
      starts[i]! - starts[i - 1]! >= 245,
      `item ${i} started ${starts[i]! - starts[i - 1]!} ms after the one before`,
    );
  const audited = await db.sql<
    { at: Date }[]
  >`SELECT at FROM operator_audit WHERE action = 'reconcile.reemit' ORDER BY at`;
  assert.equal(audited.length, 8);
  const span = audited.at(-1)!.at.getTime() - audited[0]!.at.getTime();
  assert.ok(span >= 7 * 245, `8 repairs at 4/s span at least 1.75 s, took ${span} ms`);
  assert.equal(await count(db.sql, "SELECT 1 FROM message_outbox WHERE aggregate_id LIKE 'paced-%'"), 8);
});

test('a failure inside the canary stops the pass: nothing past the canary is touched', async () => {
  const r = reconcilerOf(await items('canary', 6, [2]));
  await r.run('outbox-missing', { actor: 'test' });
  const report = await r.repair('outbox-missing', {
    actor: 'ops',
    reason: 'canary',
    dryRun: false,
    ratePerSecond: 50,
    stop: { canary: 3 },
  });
  assert.deepEqual([report.status, report.stoppedBecause], ['stopped', 'canary_failed']);
  assert.deepEqual(
    report.items.map((i) => [i.key, i.outcome]),
    [
      ['canary:canary-01@1', 'repaired'],
      ['canary:canary-02@1', 'failed'],
    ],
  );
  assert.equal(await count(db.sql, "SELECT 1 FROM message_outbox WHERE aggregate_id LIKE 'canary-%'"), 1);
  const open = await listFindings(db.sql, { check: 'outbox-missing', status: 'open' }, 10, null);
  assert.deepEqual(
    open.map((f) => f.key),
    ['canary:canary-02@1', 'canary:canary-03@1', 'canary:canary-04@1', 'canary:canary-05@1', 'canary:canary-06@1'],
  );
  assert.match(String(open[0]!.repair?.error), /downstream refused canary-02/);
  const [run] = await listRuns(db.sql, { check: 'outbox-missing', mode: 'execute' }, 1, null);
  assert.deepEqual([run!.status, run!.counts.stoppedBecause], ['stopped', 'canary_failed']);
  assert.equal(
    await count(db.sql, "SELECT 1 FROM operator_audit WHERE outcome = 'failed'"),
    1,
    'the failure is audited',
  );
});

test('past the canary the pass stops once the error ratio is exceeded', async () => {
  const r = reconcilerOf(await items('ratio', 10, [3, 5, 6]));
  await r.run('outbox-missing', { actor: 'test' });
  const report = await r.repair('outbox-missing', {
    actor: 'ops',
    reason: 'ratio',
    dryRun: false,
    ratePerSecond: 50,
    stop: { canary: 2, maxErrorRatio: 0.3, minSample: 4 },
  });
  // 3 done, 1 failed (0.33) is under the minimum sample; 4 done (0.25) is fine; 5 done, 2 failed (0.4) stops.
  assert.deepEqual([report.status, report.stoppedBecause, report.items.length], ['stopped', 'error_ratio', 5]);
  assert.deepEqual([report.counts.repaired, report.counts.failed], [3, 2]);
  assert.equal(await count(db.sql, "SELECT 1 FROM message_outbox WHERE aggregate_id LIKE 'ratio-%'"), 3);
});

test('two runs of one check at once: one runs, the other is recorded as skipped', async () => {
  const source = await items('slow', 3, [], 1000);
  const [a, b] = await Promise.all([
    reconcilerOf(source).run('outbox-missing', { actor: 'first' }),
    reconcilerOf(source).run('outbox-missing', { actor: 'second' }),
  ]);
  assert.deepEqual([a.status, b.status].sort(), ['finished', 'skipped']);
  const skipped = a.status === 'skipped' ? a : b;
  assert.equal(skipped.error, 'another run of outbox-missing is in progress');
  assert.equal((a.status === 'finished' ? a : b).counts.found, 3);
  const runs = await listRuns(db.sql, { check: 'outbox-missing', mode: 'check' }, 2, null);
  assert.deepEqual(runs.map((x) => x.status).sort(), ['finished', 'skipped']);
  // A repair pass takes the same lock: while a run holds it, the pass does not start.
  const slow = reconcilerOf(source).run('outbox-missing', { actor: 'third' });
  await new Promise((resolve) => setTimeout(resolve, 300));
  const blocked = await reconcilerOf(source).repair('outbox-missing', { actor: 'ops', reason: 'x', dryRun: false });
  assert.equal(blocked.status, 'skipped');
  assert.equal((await slow).status, 'finished');
});
