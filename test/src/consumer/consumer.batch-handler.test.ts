import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, defineConsumer } from '@postbox/engine';
import { consumeBatch, loadHandlerModule, type ConsumeStepDeps } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { ceRecord, createHandlerTables, taskSource } from '../support/consumer.ts';

// A handler module's handleBatch, through the consume step on PostgreSQL (no broker needed to show the batch
// contract): a task's events reach it in one call; a batch that throws rolls back whole and each event is then
// applied alone (a batch of one), so the healthy ones land once and the poison one alone fails for good.
const BATCH_HANDLER = new URL('./fixtures/batch-handler.ts', import.meta.url);
let db: TestDatabase;
let deps: ConsumeStepDeps;
const definition = defineConsumer({ name: 'batch-handler', topics: ['batch-handler'], handler: BATCH_HANDLER });

before(async () => {
  db = await freshDatabase();
  await createHandlerTables(db.sql);
  await db.sql`CREATE TABLE test_batch_call (id bigserial PRIMARY KEY, size int NOT NULL)`;
  const { handler, batch } = await loadHandlerModule(BATCH_HANDLER.href);
  deps = { sql: db.sql, handler, batchHandler: batch, definition };
});

after(async () => {
  await db.drop();
});

const task = taskSource('batch-handler');

async function callSizes(): Promise<number[]> {
  const rows = await db.sql<{ size: number }[]>`SELECT size FROM test_batch_call ORDER BY id`;
  return rows.map((r) => r.size);
}

test("a task's events reach handleBatch in one call and are applied once each", async () => {
  const records = ['bh-1', 'bh-2', 'bh-3', 'bh-4', 'bh-5'].map((id) => ceRecord({ aggregate_id: id, version: 1 }));
  const result = await consumeBatch(deps, task(records));
  assert.deepEqual(
    result.results.map((r) => r.outcome),
    ['applied', 'applied', 'applied', 'applied', 'applied'],
  );
  assert.deepEqual(await callSizes(), [5], 'one call for the task');
  const applied = await db.sql<{ aggregate_id: string }[]>`
    SELECT aggregate_id FROM test_applied WHERE aggregate_id LIKE 'bh-%' ORDER BY aggregate_id`;
  assert.deepEqual(
    applied.map((a) => a.aggregate_id),
    ['bh-1', 'bh-2', 'bh-3', 'bh-4', 'bh-5'],
  );

  const again = await consumeBatch(deps, task(records.map((r) => ({ ...r }))));
  assert.deepEqual(
    again.results.map((r) => r.outcome),
    ['duplicate', 'duplicate', 'duplicate', 'duplicate', 'duplicate'],
  );
  assert.deepEqual(await callSizes(), [5], 'duplicates never reach the handler');
});

test('a batch with a poison event rolls back whole; alone, the others apply once and the poison one is stored as failed', async () => {
  await db.sql`TRUNCATE test_batch_call`;
  const records = [
    ceRecord({ aggregate_id: 'bp-1', version: 1 }),
    ceRecord({ aggregate_id: 'bp-2', version: 1, data: { poison: true } }),
    ceRecord({ aggregate_id: 'bp-3', version: 1 }),
  ];
  const result = await consumeBatch(deps, task(records));
  assert.deepEqual(
    result.results.map((r) => [r.outcome, r.code ?? null]),
    [
      ['applied', null],
      ['failed', 'test_poison'],
      ['applied', null],
    ],
  );
  assert.deepEqual(
    await callSizes(),
    [1, 1],
    'the batch call rolled back, as did the poison event alone; one committed call per healthy event',
  );
  const applied = await db.sql<{ aggregate_id: string; n: number }[]>`
    SELECT aggregate_id, count(*)::int AS n FROM test_applied WHERE aggregate_id LIKE 'bp-%' GROUP BY 1 ORDER BY 1`;
  assert.deepEqual(
    applied.map((a) => [a.aggregate_id, a.n]),
    [
      ['bp-1', 1],
      ['bp-3', 1],
    ],
  );
  const failures = await db.sql<{ aggregate_id: string; error_code: string }[]>`
    SELECT aggregate_id, error_code FROM message_failure WHERE consumer_name = ${definition.name}`;
  assert.deepEqual(
    failures.map((f) => [f.aggregate_id, f.error_code]),
    [['bp-2', 'test_poison']],
  );
});

test('a handler module with neither a default export nor handleBatch is refused with what it must have', async () => {
  const empty = new URL('data:text/javascript,export const nothing = 1;');
  await assert.rejects(loadHandlerModule(empty.href), (e: unknown) => {
    assert.ok(e instanceof ConfigError);
    assert.match((e as Error).message, /must have a default export.*or a handleBatch export/);
    return true;
  });
});
