import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, defineConsumer, newEventId, type Sql } from '@postbox/engine';
import { consumeBatch, loadHandler, type ConsumeStepDeps } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { ceRecord, createHandlerTables, RECORDING_HANDLER, type RawRecord, taskSource } from '../support/consumer.ts';

// A consumer the planner's statistics do not know yet (new, or growing faster than autovacuum analyzes) is
// estimated at one row. The consume step's statements that joined a batch's ids (unnest) with this consumer's
// rows were then planned as a hash join over every row of the consumer, for each batch: 34 µs per event in the
// consumer bench instead of 4, growing with the aggregates. Each statement must read its batch's rows only,
// whatever the statistics: counted here as index entries read (pg_stat_user_indexes), not timed.
const ROWS = 20_000;
const name = 'stats-blind';
const taskOf = taskSource(name);
const definition = defineConsumer({ name, topics: [name], handler: RECORDING_HANDLER });
let db: TestDatabase;
let one: Sql;
let deps: ConsumeStepDeps;

before(async () => {
  db = await freshDatabase();
  await createHandlerTables(db.sql);
  // The statistics know another consumer's rows only; then this consumer's rows arrive, unanalyzed.
  await db.sql`ALTER TABLE consumer_aggregate_version SET (autovacuum_enabled = false)`;
  // The inbox is partitioned (migration 0017): storage settings belong to its partitions.
  for (const leaf of await inboxLeaves()) await db.sql`ALTER TABLE ${db.sql(leaf)} SET (autovacuum_enabled = false)`;
  await fill('someone-else');
  await db.sql`ANALYZE consumer_aggregate_version`;
  await db.sql`ANALYZE message_inbox`;
  await fill(name);
  // One connection: the step's statistics are flushed from the backend that ran it (pg_stat_force_next_flush).
  one = connect({ url: db.url, max: 1, applicationName: 'postbox-test-stats-blind' });
  deps = { sql: one, handler: await loadHandler(RECORDING_HANDLER.href), definition };
});

after(async () => {
  await one?.end({ timeout: 5 });
  await db?.drop();
});

/** ROWS aggregates at version 1, each with its event in the inbox. */
async function fill(consumer: string): Promise<void> {
  await db.sql`
    INSERT INTO consumer_aggregate_version (consumer_name, aggregate_id, last_version)
    SELECT ${consumer}, 'agg-' || i, 1 FROM generate_series(1, ${ROWS}) AS i`;
  await db.sql`
    INSERT INTO message_inbox (consumer_name, event_id, aggregate_id, aggregate_version)
    SELECT ${consumer}, gen_random_uuid(), 'agg-' || i, 1 FROM generate_series(1, ${ROWS}) AS i`;
}

/** The inbox's partitions (the leaves of its partition tree). */
async function inboxLeaves(): Promise<string[]> {
  const rows = await db.sql<{ leaf: string }[]>`
    SELECT relid::regclass::text AS leaf FROM pg_partition_tree('message_inbox') WHERE isleaf`;
  return rows.map((r) => r.leaf);
}

/** Index tuples read from the two tables (the inbox's partitions summed) so far, statistics flushed first. */
async function indexReads(): Promise<{ versions: number; inbox: number }> {
  await one`SELECT pg_stat_force_next_flush()`;
  await one`SELECT 1`;
  const rows = await one<{ relname: string; n: string }[]>`
    SELECT CASE WHEN s.relid = 'consumer_aggregate_version'::regclass THEN 'consumer_aggregate_version'
                ELSE 'message_inbox' END AS relname,
           sum(s.idx_tup_read)::text AS n
    FROM pg_stat_user_indexes s
    WHERE s.relid = 'consumer_aggregate_version'::regclass
       OR s.relid IN (SELECT relid FROM pg_partition_tree('message_inbox') WHERE isleaf)
    GROUP BY 1`;
  const of = (table: string) => Number(rows.find((r) => r.relname === table)?.n ?? 0);
  return { versions: of('consumer_aggregate_version'), inbox: of('message_inbox') };
}

async function step(records: RawRecord[]) {
  const task = taskOf(records);
  const before = await indexReads();
  const result = await consumeBatch(deps, task);
  const after = await indexReads();
  return {
    outcomes: result.results.map((r) => r.outcome),
    versions: after.versions - before.versions,
    inbox: after.inbox - before.inbox,
  };
}

test(`a batch of a consumer the statistics do not know reads its own rows, not its ${ROWS} others`, async () => {
  const events = [7, 4242, 19_999].map((i) =>
    ceRecord({ aggregate_id: `agg-${i}`, version: 2, event_id: newEventId(), data: { amount: i } }),
  );
  const applied = await step(events);
  assert.deepEqual(applied.outcomes, ['applied', 'applied', 'applied']);
  assert.ok(applied.versions < 200, `version rows read for 3 events: ${applied.versions}`);
  assert.ok(applied.inbox < 200, `inbox rows read for 3 events: ${applied.inbox}`);

  const redelivered = await step(events.map((e) => ({ ...e })));
  assert.deepEqual(redelivered.outcomes, ['duplicate', 'duplicate', 'duplicate']);
  assert.ok(redelivered.inbox < 200, `inbox rows read for 3 duplicates: ${redelivered.inbox}`);
  const [counted] = await db.sql<{ n: number }[]>`
    SELECT sum(duplicate_deliveries)::int AS n FROM message_inbox WHERE consumer_name = ${name}`;
  assert.equal(counted!.n, 3, 'each redelivery is counted on its inbox row');
  const [versions] = await db.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM consumer_aggregate_version WHERE consumer_name = ${name} AND last_version = 2`;
  assert.equal(versions!.n, 3, 'exactly the three aggregates moved to version 2');
});
