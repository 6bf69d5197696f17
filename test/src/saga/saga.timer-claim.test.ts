import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { defineConsumer } from '@postbox/engine';
import { consumeBatch, loadHandlerModule, type ConsumeStepDeps } from '@postbox/engine/runtime';
import { defineSaga, readSaga, SagaOrchestrator, SagaTimerRunner } from '@postbox/engine/saga';
import { ceRecord, taskSource } from '../support/consumer.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { orchestrator as replyOrchestrator, orderSaga, topics } from './fixtures/order-saga.ts';

// Concurrency of the saga rows: timer runners claim due sagas with SKIP LOCKED (a saga another runner holds is
// skipped, not waited for, and every timer fires once), and a reply consumer's batch locks its sagas in id order
// (two batches holding the same sagas in reversed orders queue instead of deadlocking).
let db: TestDatabase;

const definition = defineSaga<{ orderId: string }>({
  type: 'claim-order',
  version: 1,
  replyTopic: 'claim.replies',
  steps: [
    {
      name: 'reserve',
      topic: 'claim.inventory',
      timeoutMs: 1000,
      command: (d) => ({ type: 'inventory.reserve', data: d }),
      success: ['inventory.reserved'],
      failure: ['inventory.out_of_stock'],
    },
  ],
});
const sagas = new SagaOrchestrator([definition]);

before(async () => {
  db = await freshDatabase();
});
after(async () => {
  await db.drop();
});

async function startMany(prefix: string, n: number, t0: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const key = `${prefix}-${i}`;
    ids.push(
      (
        await db.sql.begin((tx) =>
          sagas.start(tx, definition, { businessKey: key, data: { orderId: key }, now: t0 + i }),
        )
      ).sagaId,
    );
  }
  return ids;
}

test('a runner skips a saga another transaction holds and fires the rest, without waiting for it', async () => {
  const t0 = Date.now() - 60_000;
  const [held, ...rest] = await startMany('held', 5, t0);
  const runner = new SagaTimerRunner(db.sql, sagas);
  let fired = -1;
  let locked!: () => void;
  const isLocked = new Promise<void>((resolve) => {
    locked = resolve;
  });
  let done!: () => void;
  const look = new Promise<void>((resolve) => {
    done = resolve;
  });
  // Another runner's transition in progress on the oldest due saga: its row lock held until the look is done (or
  // 5 s, for a runner that waits on it).
  const holder = db.sql.begin(async (tx) => {
    await tx`SELECT 1 FROM saga_instance WHERE saga_id = ${held!} FOR UPDATE`;
    locked();
    await Promise.race([look, new Promise((r) => setTimeout(r, 5000))]);
  });
  await isLocked;
  fired = await runner.fireDue(t0 + 5000);
  const heldAfterLook = (await readSaga(db.sql, held!))!.status;
  done();
  await holder;
  assert.equal(heldAfterLook, 'running', 'the held saga was skipped, not waited for and then fired');
  assert.equal(fired, rest.length);
  for (const id of rest) assert.equal((await readSaga(db.sql, id))!.status, 'resolving');
});

test('two runners at once fire every due saga exactly once between them', async () => {
  await db.sql`DELETE FROM saga_history`;
  await db.sql`DELETE FROM saga_instance`;
  const t0 = Date.now() - 60_000;
  const ids = await startMany('pair', 40, t0);
  const a = new SagaTimerRunner(db.sql, sagas, { batch: 100 });
  const b = new SagaTimerRunner(db.sql, sagas, { batch: 100 });
  const [firedA, firedB] = await Promise.all([a.fireDue(t0 + 5000), b.fireDue(t0 + 5000)]);
  assert.equal(firedA + firedB, ids.length, `disjoint sets (${firedA} + ${firedB})`);
  const lines = await db.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM saga_history WHERE from_status = 'running' AND to_status = 'resolving'
    GROUP BY saga_id`;
  assert.equal(lines.length, ids.length, 'every saga fired');
  assert.ok(
    lines.every((l) => l.n === 1),
    'each once',
  );
});

test('two reply batches holding the same sagas in reversed orders both apply, without a deadlock', async () => {
  const module = new URL('./fixtures/replies.handler.ts', import.meta.url);
  const { handler, batch } = await loadHandlerModule(module.href);
  const deadlocks: unknown[] = [];
  const watch =
    <A extends unknown[]>(fn: (...args: A) => Promise<void>) =>
    async (...args: A) => {
      try {
        await fn(...args);
      } catch (e) {
        if ((e as { code?: string }).code === '40P01') deadlocks.push(e);
        throw e;
      }
    };
  const consumer = defineConsumer({ name: 'claim-replies', topics: [topics.replies], handler: module });
  const deps: ConsumeStepDeps = {
    sql: db.sql,
    handler: watch(handler),
    batchHandler: batch && watch(batch),
    definition: consumer,
  };
  const ids: string[] = [];
  for (let i = 0; i < 30; i++) {
    const key = `batch-${i}`;
    ids.push(
      (
        await db.sql.begin((tx) =>
          replyOrchestrator.start(tx, orderSaga, { businessKey: key, data: { orderId: key, amount: 1 } }),
        )
      ).sagaId,
    );
  }
  // Each saga gets two replies, one in each batch: the reserve reply (forward #1) and a late duplicate from another
  // stream of the same step (its query #1 answer), so both batches move or judge the same sagas.
  const reply = (id: string, direction: 'forward' | 'query') =>
    ceRecord({
      aggregate_id: `saga:${id}:reserve:${direction}`,
      version: 1,
      event_type: direction === 'forward' ? 'inventory.reserved' : 'postbox.saga.applied',
      data: { id: `r-${id}` },
      headers: { ce_sagaid: id, ce_sagastep: 'reserve', ce_sagadirection: direction, ce_sagaattempt: '1' },
    });
  const forward = ids.map((id) => reply(id, 'forward'));
  const query = ids.map((id) => reply(id, 'query')).reverse();
  const [one, two] = await Promise.all([
    consumeBatch(deps, taskSource(topics.replies)(forward)),
    consumeBatch(deps, taskSource(topics.replies)(query)),
  ]);
  assert.equal(deadlocks.length, 0, 'no deadlock between the batches');
  assert.ok(
    [...one.results, ...two.results].every((r) => r.outcome === 'applied'),
    'every reply applied',
  );
  for (const id of ids) {
    const s = (await readSaga(db.sql, id))!;
    assert.deepEqual([s.step, s.version], [1, 2], 'reserve succeeded once, charge is out');
  }
});
