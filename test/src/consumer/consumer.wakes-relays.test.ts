import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createWaker, defineConsumer } from '@postbox/engine';
import { consumeBatch, loadHandlerModule, type ConsumeStepDeps } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { ceRecord, taskSource } from '../support/consumer.ts';

// A handler that writes outbox rows (a saga's next command, a follow-up event) commits them in the consumer's
// transaction; the relays must hear of them after that commit, as after a service's `transaction()`, or they wait
// for the poll (the saga bench's start → completed p50 was 1,041 ms with a 1 s poll and six hops). Shown on the
// consume step with PostgreSQL's NOTIFY itself: the nudge arrives after the commit and names the rows' lanes.
const CHAIN = new URL('./fixtures/chaining-handler.ts', import.meta.url);
let db: TestDatabase;
let deps: ConsumeStepDeps;
const nudges: string[] = [];
let unlisten: (() => Promise<void>) | null = null;

before(async () => {
  db = await freshDatabase();
  const definition = defineConsumer({ name: 'chain', topics: ['chain-in'], handler: CHAIN });
  const { handler, batch } = await loadHandlerModule(CHAIN.href);
  deps = { sql: db.sql, handler, batchHandler: batch, definition, waker: createWaker(db.sql) };
  const listener = await db.sql.listen('postbox_outbox', (payload) => nudges.push(payload));
  unlisten = () => listener.unlisten();
});

after(async () => {
  await unlisten?.();
  await db.drop();
});

const task = taskSource('chain-in');

async function lanesOf(aggregates: string[]): Promise<number[]> {
  const rows = await db.sql<{ lane: number }[]>`
    SELECT DISTINCT lane FROM message_outbox WHERE aggregate_id = ANY(${aggregates}::text[]) ORDER BY lane`;
  return rows.map((r) => r.lane);
}

async function nudgedLanes(): Promise<number[]> {
  await new Promise((resolve) => setTimeout(resolve, 500));
  const lanes = new Set(nudges.flatMap((p) => p.split(',').filter(Boolean).map(Number)));
  nudges.length = 0;
  return [...lanes].sort((a, b) => a - b);
}

test('events whose handler writes outbox rows: after the commit the relays are nudged about those lanes', async () => {
  const aggregates = ['ch-1', 'ch-2', 'ch-3', 'ch-4'];
  const result = await consumeBatch(deps, task(aggregates.map((a) => ceRecord({ aggregate_id: a, version: 1 }))));
  assert.deepEqual(
    result.results.map((r) => r.outcome),
    ['applied', 'applied', 'applied', 'applied'],
  );
  const lanes = await lanesOf(aggregates);
  assert.equal(lanes.length > 0, true, 'the handler wrote its rows');
  assert.deepEqual(await nudgedLanes(), lanes, 'one batch transaction: its lanes announced');

  // One event alone (its own transaction: the per-event path).
  const [one] = (await consumeBatch(deps, task([ceRecord({ aggregate_id: 'ch-5', version: 1 })]))).results;
  assert.equal(one!.outcome, 'applied');
  assert.deepEqual(await nudgedLanes(), await lanesOf(['ch-5']));
});

test('a handler that writes no outbox row sends no nudge', async () => {
  const result = await consumeBatch(
    deps,
    task(['cq-1', 'cq-2'].map((a) => ceRecord({ aggregate_id: a, version: 1, data: { quiet: true } }))),
  );
  assert.deepEqual(
    result.results.map((r) => r.outcome),
    ['applied', 'applied'],
  );
  assert.deepEqual(await nudgedLanes(), []);
  assert.deepEqual(await lanesOf(['cq-1', 'cq-2']), [], 'nothing written');
});
