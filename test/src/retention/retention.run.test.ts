import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFile, rm, truncate } from 'node:fs/promises';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { enqueue, silentLogger, type Sql } from '@postbox/engine';
import { outboxRowsAt } from '@postbox/engine/reconcile';
import {
  listPartitions,
  PARTITIONED_TABLES,
  PartitionMaintenance,
  premakePartitions,
  resolvePartitionOptions,
  resolveRetentionPolicy,
  runRetention,
  type ArchiveManifest,
} from '@postbox/engine/retention';
import { startTestApi } from '../support/api.ts';
import { readArchiveIds } from '../support/archive-csv.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { spawnPostbox } from '../support/processes.ts';

// Retention runs (issue 23) on a real database, with a clock set ahead (`--as-of`): a day's partitions past the
// window leave their tables only once archived completely (rows and checksums verified), the (aggregate, version)
// keys keep each aggregate's head, unfinished rows hold a partition, a dry run changes nothing, and a run killed
// after the detach or after the archive is finished by the next one — a damaged archive is made again, never
// trusted.
const DAY = 86_400_000;
const AGGREGATES = 40;
const VERSIONS = 5;
let db: TestDatabase;
let archiveDir: string;

before(async () => {
  db = await freshDatabase();
  archiveDir = await mkdtemp(join(tmpdir(), 'postbox-archive-'));
});

after(async () => {
  await db.drop();
  await rm(archiveDir, { recursive: true, force: true });
});

const today = Math.floor(Date.now() / DAY) * DAY;
/** The run's clock that puts day `k`'s partitions (and no later one) past a 30-day window. */
const asOf = (k: number) => new Date(today + (k + 1) * DAY + 30 * DAY);

/** A v7 id of millisecond `ms`, distinct per n. */
function idAt(ms: number, n: number): string {
  const hex = `${ms.toString(16).padStart(12, '0')}7${(n & 0xfff).toString(16).padStart(3, '0')}8${n.toString(16).padStart(15, '0')}`;
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * Day `k`'s traffic: AGGREGATES × VERSIONS events with ids of that day, published (as a relay would mark them)
 * and taken in by consumer `ret`. Returns their ids.
 */
async function fillDay(sql: Sql, k: number): Promise<string[]> {
  const ids: string[] = [];
  await sql.begin(async (tx) => {
    for (let v = 1; v <= VERSIONS; v++)
      for (let a = 0; a < AGGREGATES; a++) {
        const id = idAt(today + k * DAY + 3_600_000 + ids.length, ids.length);
        ids.push(id);
        await enqueue(
          tx,
          { event_id: id, event_type: 'RetEvent', aggregate_id: `day${k}-${a}`, aggregate_version: v, data: { a, v } },
          { topic: 'retention', producer: 'test' },
        );
      }
  });
  await sql`UPDATE message_outbox SET status = 'published', published_at = now() WHERE event_id = ANY(${ids}::uuid[])`;
  await sql`UPDATE message_outbox SET last_error = ${'timeout\nthen "refused", twice'} WHERE event_id = ${ids[3]!}`;
  await sql`
    INSERT INTO message_inbox (consumer_name, event_id, aggregate_id, aggregate_version)
    SELECT 'ret', event_id, aggregate_id, aggregate_version FROM message_outbox WHERE event_id = ANY(${ids}::uuid[])`;
  await sql`ANALYZE message_outbox`;
  await sql`ANALYZE message_inbox`;
  return ids;
}

const dayName = (table: string, k: number) =>
  `${table}_p${new Date(today + k * DAY).toISOString().slice(0, 10).replaceAll('-', '')}`;

async function partitionState(sql: Sql, table: string, k: number) {
  const name = dayName(table, k);
  const [row] = await sql<{ attached: boolean; exists: boolean; state: string | null }[]>`
    SELECT EXISTS (SELECT 1 FROM postbox_partitions(${table}::regclass) WHERE partition::text = ${name}) AS attached,
           to_regclass(${name}) IS NOT NULL AS exists,
           (SELECT state FROM retention_partition WHERE table_name = ${table} AND partition = ${name}) AS state`;
  return row!;
}

/** The archive of a partition read back: its manifest, and the event ids of its CSV rows. */
async function readArchive(
  table: string,
  k: number,
): Promise<{ manifest: ArchiveManifest; ids: string[]; file: Buffer }> {
  const base = join(archiveDir, table, dayName(table, k));
  const manifest = JSON.parse(await readFile(`${base}.manifest.json`, 'utf8')) as ArchiveManifest;
  return { manifest, ...(await readArchiveIds(`${base}.csv.gz`)) };
}

function cli(args: string[], env: Record<string, string> = {}) {
  return spawnPostbox(['retention', ...args], {
    DATABASE_URL: db.url,
    POSTBOX_ARCHIVE_DIR: archiveDir,
    LOG_LEVEL: 'warn',
    ...env,
  });
}

const policy = () => resolveRetentionPolicy({ archiveDir });

test('a day past the window: held while a row is unpublished, a dry run changes nothing, then archived whole and dropped, heads kept', async () => {
  const ids = await fillDay(db.sql, 0);
  await db.sql`UPDATE message_outbox SET status = 'pending', published_at = NULL WHERE event_id = ${ids[7]!}`;

  const plan = cli(['plan', '--json', '--as-of', asOf(0).toISOString()]);
  assert.equal(await plan.exited, 0, plan.output());
  const planned = JSON.parse(plan.output()) as {
    tables: Array<{
      table: string;
      candidates: Array<{ partition: string }>;
      held: Array<{ partition: string; reason: string }>;
    }>;
  };
  const outbox = planned.tables.find((t) => t.table === 'message_outbox')!;
  assert.deepEqual(
    outbox.held.map((h) => h.partition),
    [dayName('message_outbox', 0)],
  );
  assert.match(outbox.held[0]!.reason, /1 rows not yet published/);
  // The legacy partitions (ids from before the installation: none here) are past the window too.
  assert.deepEqual(
    outbox.candidates.map((c) => c.partition),
    ['message_outbox_p_legacy'],
  );
  const inbox = planned.tables.find((t) => t.table === 'message_inbox')!;
  assert.deepEqual(
    inbox.candidates.map((c) => c.partition),
    ['message_inbox_p_legacy', dayName('message_inbox', 0)],
  );

  const dry = cli(['run', '--dry-run', '--json', '--as-of', asOf(0).toISOString()]);
  assert.equal(await dry.exited, 0, dry.output());
  assert.deepEqual(await partitionState(db.sql, 'message_inbox', 0), { attached: true, exists: true, state: null });
  const [runs] = await db.sql<
    { dry: number }[]
  >`SELECT count(*)::int AS dry FROM retention_run WHERE dry_run AND status = 'finished'`;
  assert.equal(runs!.dry, 1, 'the dry run is recorded');

  await db.sql`UPDATE message_outbox SET status = 'published', published_at = now() WHERE event_id = ${ids[7]!}`;
  // Two runs at once: one runs, the other is recorded as skipped.
  const [a, b] = await Promise.all(
    [0, 1].map(() => runRetention(db.sql, { policy: policy(), trigger: 'cli', actor: 'test', now: asOf(0) })),
  );
  assert.deepEqual([a!.status, b!.status].sort(), ['finished', 'skipped']);
  const report = a!.status === 'finished' ? a! : b!;
  assert.deepEqual(
    report.partitions.map((p) => [p.partition, p.outcome, p.rows]),
    [
      ['message_outbox_p_legacy', 'dropped', 0],
      [dayName('message_outbox', 0), 'dropped', ids.length],
      ['message_inbox_p_legacy', 'dropped', 0],
      [dayName('message_inbox', 0), 'dropped', ids.length],
    ],
  );
  for (const table of ['message_outbox', 'message_inbox']) {
    assert.deepEqual(await partitionState(db.sql, table, 0), { attached: false, exists: false, state: 'dropped' });
    const archive = await readArchive(table, 0);
    assert.equal(archive.manifest.rows, ids.length);
    assert.deepEqual([...archive.ids].sort(), [...ids].sort(), `${table}: every row in the archive, once`);
    assert.equal(createHash('sha256').update(archive.file).digest('hex'), archive.manifest.file.sha256);
  }
  // Keys: each aggregate's head version stays (reads as archived), the versions below it are gone.
  const [keys] = await db.sql<{ n: number; heads: number }[]>`
    SELECT count(*)::int AS n, count(*) FILTER (WHERE aggregate_version = ${VERSIONS})::int AS heads
    FROM message_outbox_key WHERE aggregate_id LIKE 'day0-%'`;
  assert.deepEqual(keys, { n: AGGREGATES, heads: AGGREGATES });
  const facts = await outboxRowsAt(db.sql, [
    { aggregateId: 'day0-3', version: VERSIONS },
    { aggregateId: 'day0-3', version: 2 },
  ]);
  assert.deepEqual(
    facts.map((f) => [f.aggregate_version, f.status]),
    [[VERSIONS, 'archived']],
  );
  const audits = await db.sql`SELECT 1 FROM operator_audit WHERE action = 'retention.drop'`;
  assert.equal(audits.length, 4, 'each drop audited');

  // The control plane's view: the tables now, what was archived, the partitions made ahead (viewer scope).
  const api = await startTestApi(db.url);
  try {
    const storage = `{ storage { table partitions rows bytes oldest partitionsAhead defaultRows
                                 archived { partitions rows bytes } } }`;
    const r = await api.gql<{ storage: Array<Record<string, any>> }>(storage, {}, api.tokens.viewer);
    const byTable = Object.fromEntries(r.data!.storage.map((t) => [t.table, t]));
    for (const table of ['message_outbox', 'message_inbox']) {
      const t = byTable[table]!;
      assert.equal(t.archived.partitions, 2, table);
      assert.equal(t.archived.rows, ids.length, table);
      assert.ok(t.archived.bytes > 0, table);
      assert.equal(t.oldest, null, `${table}: nothing left but the partitions ahead`);
      assert.ok(t.partitionsAhead >= 6, `${table}: ${t.partitionsAhead} partitions ahead`);
      assert.equal(t.defaultRows, 0);
    }
    const denied = await api.gql(storage, {}, null);
    assert.ok(denied.errors?.length, 'storage needs the viewer scope');
  } finally {
    await api.close();
  }
});

test('a run killed after the detach is finished by the next: the detached table archived and dropped, nothing lost', async () => {
  const ids = await fillDay(db.sql, 1);
  const killed = cli(['run', '--force', '--as-of', asOf(1).toISOString()], {
    POSTBOX_FAILPOINT: 'retention.after-detach',
  });
  await killed.exited;
  assert.equal(killed.child.signalCode, 'SIGKILL', killed.output());
  assert.deepEqual(await partitionState(db.sql, 'message_outbox', 1), {
    attached: false,
    exists: true,
    state: 'detached',
  });
  const [left] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM ${db.sql(dayName('message_outbox', 1))}`;
  assert.equal(left!.n, ids.length, 'the detached table keeps every row');

  const again = cli(['run', '--force', '--as-of', asOf(1).toISOString()]);
  assert.equal(await again.exited, 0, again.output());
  assert.match(again.output(), /2 partitions archived and dropped/);
  for (const table of ['message_outbox', 'message_inbox']) {
    assert.deepEqual(await partitionState(db.sql, table, 1), { attached: false, exists: false, state: 'dropped' });
    assert.deepEqual([...(await readArchive(table, 1)).ids].sort(), [...ids].sort());
  }
});

test('a run killed between archive and drop, the archive then damaged: the next run refuses to drop, the one after archives again', async () => {
  const ids = await fillDay(db.sql, 2);
  const killed = cli(['run', '--force', '--as-of', asOf(2).toISOString()], {
    POSTBOX_FAILPOINT: 'retention.after-archive-before-drop',
  });
  await killed.exited;
  assert.equal(killed.child.signalCode, 'SIGKILL', killed.output());
  assert.equal((await partitionState(db.sql, 'message_outbox', 2)).state, 'archived');
  const file = join(archiveDir, 'message_outbox', `${dayName('message_outbox', 2)}.csv.gz`);
  await truncate(file, 100);

  const refused = cli(['run', '--force', '--as-of', asOf(2).toISOString()]);
  assert.equal(await refused.exited, 1, refused.output());
  assert.match(refused.output(), /archive_incomplete|is not complete/);
  assert.deepEqual(await partitionState(db.sql, 'message_outbox', 2), {
    attached: false,
    exists: true,
    state: 'detached',
  });

  const again = cli(['run', '--force', '--as-of', asOf(2).toISOString()]);
  assert.equal(await again.exited, 0, again.output());
  assert.deepEqual(await partitionState(db.sql, 'message_outbox', 2), {
    attached: false,
    exists: false,
    state: 'dropped',
  });
  const archive = await readArchive('message_outbox', 2);
  assert.deepEqual([...archive.ids].sort(), [...ids].sort());
  const [failed] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM retention_run WHERE status = 'failed' AND error LIKE '%not complete%'`;
  assert.equal(failed!.n, 1, 'the refused run is recorded with its reason');
});

test('the daily run: two processes start their maintenance at once, one runs retention, the other finds it taken', async () => {
  const own = await freshDatabase();
  const dir = await mkdtemp(join(tmpdir(), 'postbox-archive-'));
  const sql = own.sql;
  try {
    // Partitions of 1 s and windows of 1 s, so that "a day" of this clock passes in the test.
    for (const table of PARTITIONED_TABLES) {
      for (const p of await listPartitions(sql, table)) if (!p.isDefault) await sql`DROP TABLE ${sql(p.partition)}`;
      await premakePartitions(sql, table, 1, 30);
    }
    const second = 1 / 86_400;
    const policy = resolveRetentionPolicy({ archiveDir: dir, outboxDays: second, inboxDays: second });
    const id = idAt(Date.now(), 1);
    await sql.begin((tx) =>
      enqueue(
        tx,
        { event_id: id, event_type: 'RetEvent', aggregate_id: 'sched-1', aggregate_version: 1, data: {} },
        { topic: 'retention', producer: 'test' },
      ),
    );
    await sql`UPDATE message_outbox SET status = 'published', published_at = now() WHERE event_id = ${id}`;
    await new Promise((r) => setTimeout(r, 3000));

    const options = resolvePartitionOptions({ periodSeconds: 1, ahead: 30, checkMs: 60_000 });
    const both = [0, 1].map(() => new PartitionMaintenance({ sql, options, log: silentLogger, retention: policy }));
    await Promise.all(both.map((m) => m.start()));
    await Promise.all(both.map((m) => m.retentionRun));
    await Promise.all(both.map((m) => m.stop()));
    const runs = await sql<{ status: string; n: number }[]>`
      SELECT status, count(*)::int AS n FROM retention_run WHERE trigger = 'schedule' GROUP BY status ORDER BY status`;
    const finished = runs.find((r) => r.status === 'finished')?.n ?? 0;
    assert.equal(finished, 1, `one scheduled run: ${JSON.stringify(runs)}`);
    const [gone] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_outbox WHERE event_id = ${id}`;
    assert.equal(gone!.n, 0, 'the event left with its partition');
    const [archived] = await sql<{ rows: number }[]>`
      SELECT coalesce(sum(rows), 0)::int AS rows FROM retention_partition WHERE table_name = 'message_outbox' AND state = 'dropped'`;
    assert.equal(archived!.rows, 1, 'archived before it was dropped');
  } finally {
    await own.drop();
    await rm(dir, { recursive: true, force: true });
  }
});

test('rows in the default partition past the window (old ids replayed) get a partition of their own and leave archived; a recent one is held', async () => {
  const own = await freshDatabase();
  const dir = await mkdtemp(join(tmpdir(), 'postbox-archive-'));
  const sql = own.sql;
  try {
    // As after the first retention run: the legacy partitions (everything before the installation) are gone.
    for (const table of PARTITIONED_TABLES) await sql`DROP TABLE ${sql(`${table}_p_legacy`)}`;
    const old = today - 100 * DAY;
    const [archivedId, heldId] = [idAt(old + 3_600_000, 1), idAt(old + 7_200_000, 2)];
    await sql.begin(async (tx) => {
      let v = 0;
      for (const id of [archivedId, heldId])
        await enqueue(
          tx,
          { event_id: id, event_type: 'RetEvent', aggregate_id: 'replayed-1', aggregate_version: ++v, data: {} },
          { topic: 'retention', producer: 'test' },
        );
    });
    // One was published a hundred days ago; the other only now (a replay of an old event): inside the window.
    await sql`UPDATE message_outbox SET status = 'published', published_at = ${new Date(old + 3_600_000)} WHERE event_id = ${archivedId}`;
    await sql`UPDATE message_outbox SET status = 'published', published_at = now() WHERE event_id = ${heldId}`;
    const [before] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_outbox_p_default`;
    assert.equal(before!.n, 2, 'ids older than every range are in the default partition');

    const report = await runRetention(sql, {
      policy: resolveRetentionPolicy({ archiveDir: dir, inboxDays: null }),
      trigger: 'cli',
      actor: 'test',
    });
    const day = dayName('message_outbox', -100);
    assert.equal(report.defaultSwept, 1, 'one partition made for the day of both rows');
    assert.deepEqual(
      report.plan.find((t) => t.table === 'message_outbox')!.held.map((h) => [h.partition, h.reason]),
      [[day, '1 rows written or published inside the window']],
    );
    // A partition leaves whole: the recent row holds its old neighbour too.
    const [after] = await sql<{ in_default: number; kept: string[] }[]>`
      SELECT (SELECT count(*) FROM message_outbox_p_default)::int AS in_default,
             (SELECT array_agg(event_id::text ORDER BY event_id) FROM ${sql(day)}) AS kept`;
    assert.deepEqual(after, { in_default: 0, kept: [archivedId, heldId].sort() });

    // Once the replayed one is old too, the partition leaves archived, like any other.
    await sql`UPDATE message_outbox SET published_at = ${new Date(old)} WHERE event_id = ${heldId}`;
    const second = await runRetention(sql, {
      policy: resolveRetentionPolicy({ archiveDir: dir, inboxDays: null }),
      trigger: 'cli',
      actor: 'test',
    });
    assert.deepEqual(
      second.partitions.map((p) => [p.partition, p.outcome, p.rows]),
      [[day, 'dropped', 2]],
    );
    const { ids } = await readArchiveIds(join(dir, 'message_outbox', `${day}.csv.gz`));
    assert.deepEqual(ids.sort(), [archivedId, heldId].sort());
  } finally {
    await own.drop();
    await rm(dir, { recursive: true, force: true });
  }
});

test('the sweep makes at most 10 partitions a run and the next run goes on: 12 old days in the default leave over two runs', async () => {
  const own = await freshDatabase();
  const dir = await mkdtemp(join(tmpdir(), 'postbox-archive-'));
  const sql = own.sql;
  try {
    for (const table of PARTITIONED_TABLES) await sql`DROP TABLE ${sql(`${table}_p_legacy`)}`;
    const ids = Array.from({ length: 12 }, (_, k) => idAt(today - (100 + k) * DAY + 3_600_000, k + 1));
    await sql.begin(async (tx) => {
      for (const [i, id] of ids.entries())
        await enqueue(
          tx,
          { event_id: id, event_type: 'RetEvent', aggregate_id: 'swept-1', aggregate_version: i + 1, data: {} },
          { topic: 'retention', producer: 'test' },
        );
    });
    await sql`UPDATE message_outbox SET status = 'published', published_at = ${new Date(today - 200 * DAY)} WHERE aggregate_id = 'swept-1'`;
    const run = () =>
      runRetention(sql, {
        policy: resolveRetentionPolicy({ archiveDir: dir, inboxDays: null }),
        trigger: 'cli',
        actor: 'test',
      });
    const first = await run();
    const second = await run();
    const dropped = (r: typeof first) => r.partitions.filter((p) => p.outcome === 'dropped').length;
    assert.deepEqual(
      [first.defaultSwept, dropped(first), second.defaultSwept, dropped(second)],
      [10, 10, 2, 2],
      'ten partitions a run (the default stays locked for a call), the rest by the next',
    );
    const [left] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_outbox_p_default`;
    assert.equal(left!.n, 0);
  } finally {
    await own.drop();
    await rm(dir, { recursive: true, force: true });
  }
});
