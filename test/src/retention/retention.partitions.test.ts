import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { enqueue, newEventId, type Tx } from '@postbox/engine';
import { listPartitions, premakePartitions } from '@postbox/engine/retention';
import { freshDatabase, type TestDatabase } from '../support/database.ts';

// The pieces of time partitioning (migrations 0016, 0017; ADR 0009) on a real database: the (aggregate, version)
// registry that keeps versions unique across partitions, the SQL bounds against the ids Postbox makes, and the
// premaking of partitions (idempotent, once under concurrency, rows of a new range taken out of the default).
let db: TestDatabase;

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  await db.drop();
});

function write(tx: Tx, aggregate: string, version: number, eventId = newEventId()) {
  return enqueue(
    tx,
    { event_id: eventId, event_type: 'KeyTest', aggregate_id: aggregate, aggregate_version: version, data: {} },
    { topic: 'keys', producer: 'test' },
  );
}

test('a second event of one (aggregate, version) is refused whichever partition its id falls in; a deleted row frees its version', async () => {
  await db.sql.begin((tx) => write(tx, 'key-a', 1));
  // An id of a year ago lands in the default partition, not the first event's: the registry still refuses it.
  const [old] = await db.sql<{ id: string }[]>`
    SELECT postbox_uuid_floor(now() - interval '365 days')::text AS id`;
  await assert.rejects(
    db.sql.begin((tx) => write(tx, 'key-a', 1, old!.id)),
    (e: { code?: string; constraint_name?: string }) =>
      e.code === '23505' && e.constraint_name === 'message_outbox_key_pkey',
  );
  const rows = await db.sql`SELECT 1 FROM message_outbox WHERE aggregate_id = 'key-a'`;
  assert.equal(rows.length, 1, 'the refused statement wrote nothing');

  // Reconciliation's re-emit of a lost event: the row deleted (the key with it), the version written again.
  await db.sql`DELETE FROM message_outbox WHERE aggregate_id = 'key-a'`;
  await db.sql.begin((tx) => write(tx, 'key-a', 1, old!.id));
  const [key] = await db.sql<{ event_id: string }[]>`
    SELECT event_id::text FROM message_outbox_key WHERE aggregate_id = 'key-a' AND aggregate_version = 1`;
  assert.equal(key!.event_id, old!.id);
});

test('the SQL bounds match the ids Postbox makes: an id is at or past the floor of its millisecond, below the next', async () => {
  for (let i = 0; i < 200; i++) {
    const id = newEventId();
    const [r] = await db.sql<{ at: boolean; below: boolean; same_ms: boolean }[]>`
      SELECT ${id}::uuid >= postbox_uuid_floor(postbox_uuid_time(${id}::uuid)) AS at,
             ${id}::uuid < postbox_uuid_floor(postbox_uuid_time(${id}::uuid) + interval '1 millisecond') AS below,
             postbox_uuid_time(${id}::uuid) = postbox_uuid_time(postbox_uuid_floor(postbox_uuid_time(${id}::uuid))) AS same_ms`;
    assert.deepEqual(r, { at: true, below: true, same_ms: true }, id);
  }
  const t = new Date('2026-12-06T00:00:00.000Z');
  const [r] = await db.sql<{ floor: string; back: Date }[]>`
    SELECT postbox_uuid_floor(${t})::text AS floor, postbox_uuid_time(postbox_uuid_floor(${t})) AS back`;
  assert.equal(r!.floor.slice(0, 13).replace('-', ''), t.getTime().toString(16).padStart(12, '0'));
  assert.equal(r!.back.getTime(), t.getTime());
});

test('premaking is idempotent, makes each partition once when processes do it at once, and moves default rows into a new range', async () => {
  const before = await listPartitions(db.sql, 'message_outbox');
  // The migration made 7 days ahead (6 here: the test may start just after a midnight the migration did not see).
  assert.equal(await premakePartitions(db.sql, 'message_outbox', 86_400, 6), 0, 'the migration made them already');

  // An event 20 days ahead (a clock far off) has no partition yet: it waits in the default.
  const [ahead] = await db.sql<{ id: string }[]>`SELECT postbox_uuid_floor(now() + interval '20 days')::text AS id`;
  await db.sql.begin((tx) => write(tx, 'key-ahead', 1, ahead!.id));
  const where = async () =>
    (
      await db.sql<
        { p: string }[]
      >`SELECT tableoid::regclass::text AS p FROM message_outbox WHERE event_id = ${ahead!.id}`
    )[0]!.p;
  assert.equal(await where(), 'message_outbox_p_default');

  const made = await Promise.all([1, 2, 3].map(() => premakePartitions(db.sql, 'message_outbox', 86_400, 25)));
  const after = await listPartitions(db.sql, 'message_outbox');
  assert.equal(
    made.reduce((a, b) => a + b, 0),
    after.length - before.length,
    'each partition made once',
  );
  assert.ok(made.filter((n) => n > 0).length === 1, `one of the three made them: ${made}`);
  // The day of the id itself (its first 48 bits), not of the test's clock.
  const day = new Date(Number.parseInt(ahead!.id.replaceAll('-', '').slice(0, 12), 16))
    .toISOString()
    .slice(0, 10)
    .replaceAll('-', '');
  assert.equal(await where(), `message_outbox_p${day}`, 'the row moved out of the default into its day');
  const [count] = await db.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM message_outbox_p_default WHERE event_id = ${ahead!.id}`;
  assert.equal(count!.n, 0, 'and left the default');

  // Consecutive ranges, no gap, no overlap; names follow the day.
  const ranges = after.filter((p) => !p.isDefault);
  for (let i = 1; i < ranges.length; i++)
    assert.equal(ranges[i]!.from!.getTime(), ranges[i - 1]!.to!.getTime(), `${ranges[i]!.partition} follows on`);
  await assert.rejects(premakePartitions(db.sql, 'message_outbox', 0, 1), /takes a period of 1 s to 366 days, not 0 s/);
});

test('a conversion left half done never stops writers: its legacy bound moves on before it is reached', async () => {
  // A table between 0017's `bound` and `swap` steps, its bound an hour away (the swap never got its lock, days ago).
  await db.sql`CREATE TABLE half_done (event_id uuid NOT NULL)`;
  const [soon] = await db.sql<{ id: string }[]>`SELECT postbox_uuid_floor(now() + interval '1 hour')::text AS id`;
  await db.sql.unsafe(
    `ALTER TABLE half_done ADD CONSTRAINT half_done_legacy_bound CHECK (event_id < '${soon!.id}'::uuid) NOT VALID`,
  );
  const [later] = await db.sql<{ id: string }[]>`SELECT postbox_uuid_floor(now() + interval '2 hours')::text AS id`;
  await assert.rejects(
    db.sql`INSERT INTO half_done VALUES (${later!.id})`,
    (e: { code?: string }) => e.code === '23514',
  );

  const moved = async () =>
    (await db.sql<{ moved: boolean }[]>`SELECT postbox_extend_legacy_bound('half_done') AS moved`)[0]!.moved;
  assert.equal(await moved(), true, 'the bound was less than a day away');
  await db.sql`INSERT INTO half_done VALUES (${later!.id})`;
  assert.equal(await moved(), false, 'two days away now: left alone');
  const [made] = await db.sql<{ n: number }[]>`
    SELECT postbox_premake_partitions('half_done', interval '1 day', 7) AS n`;
  assert.equal(made!.n, 0, 'no partitions for a table not converted yet');
});

test('a process of this version makes partitions ahead on a schema from before 0020 too (a rolling upgrade)', async () => {
  const older = await freshDatabase('pbt', undefined, { migrateTo: 19 });
  try {
    const [fn] = await older.sql<
      { n: number }[]
    >`SELECT count(*)::int AS n FROM pg_proc WHERE proname = 'postbox_premake'`;
    assert.equal(fn!.n, 0, 'the owner-rights wrapper is not there yet');
    const before = (await listPartitions(older.sql, 'message_outbox')).length;
    assert.ok((await premakePartitions(older.sql, 'message_outbox', 86_400, 12)) > 0);
    assert.ok((await listPartitions(older.sql, 'message_outbox')).length > before);
  } finally {
    await older.drop();
  }
});
