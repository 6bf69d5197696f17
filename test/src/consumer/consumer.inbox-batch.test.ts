import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { defineConsumer } from '@postbox/engine';
import { consumeBatch, loadHandler, type ConsumeStepDeps } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { ceRecord, createHandlerTables, RECORDING_HANDLER, taskSource } from '../support/consumer.ts';

// The consume step straight on PostgreSQL (no broker): one task may hold two deliveries of one event id — the
// consumer groups records by aggregate, and a reused id under another aggregate lands beside the original. The
// first is the one taken in; a byte-identical copy is a counted duplicate, a different one a conflict, also
// when the copy comes in a later task (the fault suite once saw a true duplicate reported as a conflict: the
// inbox had stored the second record's fingerprint).
let db: TestDatabase;
let deps: ConsumeStepDeps;
const definition = defineConsumer({ name: 'inbox-batch', topics: ['inbox-batch'], handler: RECORDING_HANDLER });

before(async () => {
  db = await freshDatabase();
  await createHandlerTables(db.sql);
  deps = { sql: db.sql, handler: await loadHandler(RECORDING_HANDLER.href), definition };
});

after(async () => {
  await db.drop();
});

const task = taskSource('inbox-batch');

async function inboxRow(eventId: string) {
  const [row] = await db.sql<{ aggregate_id: string; duplicate_deliveries: number }[]>`
    SELECT aggregate_id, duplicate_deliveries FROM message_inbox WHERE consumer_name = ${definition.name} AND event_id = ${eventId}`;
  return row;
}

test('a task holding an event and the same id under another aggregate: the first is taken in, the other is a conflict; a later byte-identical copy is a duplicate', async () => {
  const original = ceRecord({ aggregate_id: 'ib-1', version: 1, data: { amount: 10 } });
  const id = original.headers.ce_id!;
  const reused = ceRecord({ aggregate_id: 'ib-2', version: 1, event_id: id, data: { amount: 10 } });

  const first = await consumeBatch(deps, task([original, reused]));
  assert.deepEqual(
    first.results.map((r) => r.outcome),
    ['applied', 'failed'],
  );
  assert.equal(first.results[1]!.code, 'event_id_conflict');
  assert.deepEqual(
    await inboxRow(id),
    { aggregate_id: 'ib-1', duplicate_deliveries: 0 },
    'the inbox holds the first delivery',
  );

  const copy = await consumeBatch(deps, task([{ ...original }]));
  assert.deepEqual(
    copy.results.map((r) => r.outcome),
    ['duplicate'],
    'the same bytes again are a duplicate, not a conflict',
  );
  assert.deepEqual(await inboxRow(id), { aggregate_id: 'ib-1', duplicate_deliveries: 1 });

  const failures = await db.sql<
    { error_code: string }[]
  >`SELECT error_code FROM message_failure WHERE consumer_name = ${definition.name}`;
  assert.deepEqual(
    failures.map((f) => f.error_code),
    ['event_id_conflict'],
  );
  const applied = await db.sql<
    { aggregate_id: string }[]
  >`SELECT aggregate_id FROM test_applied WHERE event_id = ${id}`;
  assert.deepEqual(
    applied.map((a) => a.aggregate_id),
    ['ib-1'],
    'applied once, with the first content',
  );
});

test('a task holding a reused id first and then a byte-identical copy of the event taken in before: a conflict, then a duplicate', async () => {
  const original = ceRecord({ aggregate_id: 'ib-4', version: 1, data: { amount: 10 } });
  const id = original.headers.ce_id!;
  const reused = ceRecord({ aggregate_id: 'ib-5', version: 1, event_id: id, data: { amount: 99 } });
  assert.deepEqual(
    (await consumeBatch(deps, task([original]))).results.map((r) => r.outcome),
    ['applied'],
  );

  const later = await consumeBatch(deps, task([reused, { ...original }]));
  assert.deepEqual(
    later.results.map((r) => [r.outcome, r.code]),
    [
      ['failed', 'event_id_conflict'],
      ['duplicate', undefined],
    ],
    'each judged against what the inbox holds',
  );
  assert.deepEqual(await inboxRow(id), { aggregate_id: 'ib-4', duplicate_deliveries: 1 });
});

test('byte-identical copies inside one task are counted as duplicates on the inbox row', async () => {
  const original = ceRecord({ aggregate_id: 'ib-3', version: 1 });
  const result = await consumeBatch(deps, task([original, { ...original }, { ...original }]));
  assert.deepEqual(
    result.results.map((r) => r.outcome),
    ['applied', 'duplicate', 'duplicate'],
  );
  assert.deepEqual(await inboxRow(original.headers.ce_id!), { aggregate_id: 'ib-3', duplicate_deliveries: 2 });
});
