import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  BusinessConflictError,
  createWaker,
  enqueue,
  enqueueMany,
  EnvelopeTooLargeError,
  EnvelopeValidationError,
  expectRows,
  idempotent,
  IdempotencyConflictError,
  transaction,
} from '@postbox/engine';
import type { Relay } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, readTopic, uniqueTopic } from '../support/kafka.ts';
import { outboxCounts, startTestRelay } from '../support/relay.ts';
import { waitFor } from '../support/processes.ts';

let db: TestDatabase;
let relay: Relay;
const topic = uniqueTopic('outbox');

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 3);
  relay = await startTestRelay(db.sql);
});

after(async () => {
  await relay.stop();
  await db.drop();
});

test('a rolled-back business transaction publishes nothing; a committed one is on the topic with its headers', async () => {
  const waker = createWaker(db.sql);
  await assert.rejects(
    transaction(db.sql, waker, async (tx) => {
      await tx`INSERT INTO demo_order (order_id, state, amount_cents, version) VALUES ('o-rolled', 'placed', 1, 1)`;
      await enqueue(
        tx,
        { event_type: 'OrderPlaced', aggregate_id: 'o-rolled', aggregate_version: 1, data: { n: 0 } },
        { topic },
      );
      throw new Error('business rule says no');
    }),
    /business rule says no/,
  );
  const committed = await transaction(db.sql, waker, async (tx) => {
    await tx`INSERT INTO demo_order (order_id, state, amount_cents, version) VALUES ('o-kept', 'placed', 1, 1)`;
    return enqueue(
      tx,
      {
        event_type: 'OrderPlaced',
        aggregate_id: 'o-kept',
        aggregate_version: 1,
        data: { n: 1, text: 'grüße' },
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
        deadline: '2030-01-01T00:00:00.000Z',
      },
      { topic, producer: 'orders-test' },
    );
  });
  await waitFor('the committed event to be published', async () => (await outboxCounts(db.sql)).published === 1);
  const records = await readTopic(topic, (r) => r.length >= 1, 20_000);
  // Read a little longer: a second record would be the rolled-back one.
  const again = await readTopic(topic, (all) => all.length >= 2, 4000);
  assert.equal(again.length, 1, 'exactly one record on the topic');
  const [r] = records;
  assert.equal(r!.key, 'o-kept');
  assert.deepEqual(JSON.parse(r!.value.toString('utf8')), { n: 1, text: 'grüße' });
  assert.equal(r!.headers.ce_id, committed.event_id);
  assert.equal(r!.headers.ce_specversion, '1.0');
  assert.equal(r!.headers.ce_type, 'OrderPlaced');
  assert.equal(r!.headers.ce_source, 'orders-test');
  assert.equal(r!.headers.ce_subject, 'o-kept');
  assert.equal(r!.headers.ce_aggregateversion, '1');
  assert.equal(r!.headers.ce_schemaversion, '1');
  assert.equal(new Date(r!.headers.ce_time!).toISOString(), committed.occurred_at);
  assert.equal(r!.headers['content-type'], 'application/json');
  assert.equal(r!.headers.traceparent, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
  assert.equal(r!.headers.ce_deadline, '2030-01-01T00:00:00.000Z');
  const [row] = await db.sql<{ status: string; broker_partition: number; broker_offset: string; attempts: number }[]>`
    SELECT status, broker_partition, broker_offset::text, attempts FROM message_outbox WHERE event_id = ${committed.event_id}`;
  assert.deepEqual(row, { status: 'published', broker_partition: r!.partition, broker_offset: r!.offset, attempts: 1 });
  const orders = await db.sql`SELECT order_id FROM demo_order ORDER BY order_id`;
  assert.deepEqual(
    orders.map((o) => o.order_id),
    ['o-kept'],
  );
});

test('invalid and oversize envelopes are refused at enqueue and the caller transaction is not half-written', async () => {
  const before = await outboxCounts(db.sql);
  await assert.rejects(
    db.sql.begin(async (tx) => {
      await tx`INSERT INTO demo_order (order_id, state, amount_cents, version) VALUES ('o-invalid', 'placed', 1, 1)`;
      await enqueueMany(
        tx,
        [
          { event_type: 'OrderPlaced', aggregate_id: 'o-invalid', aggregate_version: 1, data: {} },
          { event_type: 'OrderPaid', aggregate_id: 'o-invalid', aggregate_version: 0, data: {} },
        ],
        { topic },
      );
    }),
    (error: unknown) =>
      error instanceof EnvelopeValidationError &&
      error.issues.some((i) => i.path === 'aggregate_version') &&
      /aggregate_version: must be at least 1/.test(error.message),
  );
  await assert.rejects(
    db.sql.begin(async (tx) => {
      await tx`INSERT INTO demo_order (order_id, state, amount_cents, version) VALUES ('o-big', 'placed', 1, 1)`;
      await enqueue(
        tx,
        {
          event_type: 'OrderPlaced',
          aggregate_id: 'o-big',
          aggregate_version: 1,
          data: { blob: 'x'.repeat(1024 * 1024) },
        },
        { topic },
      );
    }),
    (error: unknown) => error instanceof EnvelopeTooLargeError && error.limit === 1024 * 1024,
  );
  await assert.rejects(
    db.sql.begin((tx) =>
      enqueue(
        tx,
        { event_type: 'Small', aggregate_id: 'o-small', aggregate_version: 1, data: 'x'.repeat(600) },
        { topic, maxEnvelopeBytes: 512 },
      ),
    ),
    EnvelopeTooLargeError,
  );
  assert.deepEqual(await outboxCounts(db.sql), before);
  const orders = await db.sql`SELECT order_id FROM demo_order WHERE order_id IN ('o-invalid', 'o-big')`;
  assert.equal(orders.length, 0, 'no business row without its event');
});

test('an idempotency-key repeat returns the first result and event id; a different request is a typed conflict', async () => {
  const command = { scope: 'place-order', key: 'req-42', request: { orderId: 'o-idem', amount: 5 } };
  const place = () =>
    db.sql.begin((tx) =>
      idempotent(tx, command, async (t) => {
        await t`INSERT INTO demo_order (order_id, state, amount_cents, version) VALUES ('o-idem', 'placed', 5, 1)`;
        const e = await enqueue(
          t,
          { event_type: 'OrderPlaced', aggregate_id: 'o-idem', aggregate_version: 1, data: { amount: 5 } },
          { topic },
        );
        return { orderId: 'o-idem', eventId: e.event_id };
      }),
    );
  const first = await place();
  const second = await place();
  assert.equal(first.repeated, false);
  assert.equal(second.repeated, true);
  assert.deepEqual(second.result, first.result);
  // Key order does not make a repeat look different.
  const reordered = await db.sql.begin((tx) =>
    idempotent(tx, { ...command, request: { amount: 5, orderId: 'o-idem' } }, async () =>
      assert.fail('must not run again'),
    ),
  );
  assert.deepEqual(reordered.result, first.result);
  await assert.rejects(
    db.sql.begin((tx) =>
      idempotent(tx, { ...command, request: { orderId: 'o-idem', amount: 6 } }, async () =>
        assert.fail('must not run'),
      ),
    ),
    (e: unknown) => e instanceof IdempotencyConflictError && e.code === 'idempotency_conflict' && e.key === 'req-42',
  );
  const [count] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_outbox WHERE aggregate_id = 'o-idem'`;
  assert.equal(count!.n, 1, 'one event for the command however often it is repeated');
});

test('concurrent repeats of one idempotency key run the command once', async () => {
  const command = { scope: 'place-order', key: 'req-concurrent', request: { orderId: 'o-conc' } };
  const results = await Promise.all(
    Array.from({ length: 5 }, () =>
      db.sql.begin((tx) =>
        idempotent(tx, command, async (t) => {
          const e = await enqueue(
            t,
            { event_type: 'OrderPlaced', aggregate_id: 'o-conc', aggregate_version: 1, data: {} },
            { topic },
          );
          return { eventId: e.event_id };
        }),
      ),
    ),
  );
  assert.equal(results.filter((r) => !r.repeated).length, 1);
  assert.equal(new Set(results.map((r) => r.result.eventId)).size, 1);
  const [count] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_outbox WHERE aggregate_id = 'o-conc'`;
  assert.equal(count!.n, 1);
});

test('a concurrent update that loses the race is a typed business conflict and writes no event', async () => {
  await db.sql`INSERT INTO demo_order (order_id, state, amount_cents, version) VALUES ('o-race', 'placed', 1, 1)`;
  const pay = () =>
    db.sql.begin(async (tx) => {
      const result =
        await tx`UPDATE demo_order SET state = 'paid', version = version + 1 WHERE order_id = 'o-race' AND state = 'placed'`;
      expectRows(result, 1, 'order o-race is no longer placed');
      await enqueue(tx, { event_type: 'OrderPaid', aggregate_id: 'o-race', aggregate_version: 2, data: {} }, { topic });
    });
  const outcomes = await Promise.allSettled([pay(), pay(), pay()]);
  assert.equal(outcomes.filter((o) => o.status === 'fulfilled').length, 1);
  for (const o of outcomes.filter((o) => o.status === 'rejected')) {
    assert.ok(o.reason instanceof BusinessConflictError, String(o.reason));
    assert.match(o.reason.message, /no longer placed \(expected 1 row\(s\), matched 0\)/);
  }
  const [count] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_outbox WHERE aggregate_id = 'o-race'`;
  assert.equal(count!.n, 1);
});

test('two migrators starting at once apply each migration once', async () => {
  const { migrate } = await import('@postbox/engine');
  const { readMigrations } = await import('@postbox/engine/testing');
  const results = await Promise.all([migrate(db.sql), migrate(db.sql)]);
  assert.deepEqual(results, [[], []]);
  const rows = await db.sql`SELECT version FROM postbox_migration WHERE scope = 'postbox' ORDER BY version`;
  assert.deepEqual(
    rows.map((r) => r.version),
    (await readMigrations()).map((f) => f.version),
  );
});
