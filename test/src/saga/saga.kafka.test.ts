import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Relay } from '@postbox/engine/runtime';
import type { Consumer } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { startTestConsumer } from '../support/consumer.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { startTestRelay } from '../support/relay.ts';

// Sagas over the real pipeline: commands leave through the outbox and the relay, participants are ordinary
// consumers (inbox, version gate) built with participant(), replies come back through a consumer running the
// orchestrator's reply handler. Every fourth order is over the payment limit and must end compensated.
let db: TestDatabase;
let relay: Relay;
const consumers: Consumer[] = [];
const fixtures = new URL('./fixtures/', import.meta.url);

before(async () => {
  process.env.POSTBOX_TEST_SAGA_PREFIX = uniqueTopic('saga');
  const { topics } = await import('./fixtures/order-saga.ts');
  db = await freshDatabase();
  await db.sql`CREATE TABLE test_saga_effect (participant text NOT NULL, order_id text NOT NULL, action text NOT NULL)`;
  for (const topic of Object.values(topics)) await createTopic(topic, 2);
  relay = await startTestRelay(db.sql);
  const run = (name: string, topic: string, handler: string) =>
    startTestConsumer(
      db.url,
      { name, topics: [topic], handler: new URL(handler, fixtures), fromBeginning: true },
      { inline: true },
    );
  consumers.push(
    await run('saga-inventory', topics.inventory, 'inventory.handler.ts'),
    await run('saga-payments', topics.payments, 'payments.handler.ts'),
    await run('saga-shipping', topics.shipping, 'shipping.handler.ts'),
    await run('saga-replies', topics.replies, 'replies.handler.ts'),
  );
});

after(async () => {
  await Promise.all(consumers.map((c) => c.stop()));
  await relay?.stop();
  await db?.drop();
});

test('twenty orders through Kafka: fifteen complete, five over the limit compensate; every effect happens once', async () => {
  const { orchestrator, orderSaga } = await import('./fixtures/order-saga.ts');
  const orders = Array.from({ length: 20 }, (_, i) => ({ orderId: `o-${i}`, amount: i % 4 === 3 ? 5000 : 100 + i }));
  for (const o of orders) {
    await db.sql.begin((tx) => orchestrator.start(tx, orderSaga, { businessKey: o.orderId, data: o }));
  }
  const statuses = await waitFor(
    'every saga to finish',
    async () => {
      const rows = await db.sql<{ status: string; n: number }[]>`
        SELECT status, count(*)::int AS n FROM saga_instance GROUP BY status ORDER BY status`;
      const byStatus = Object.fromEntries(rows.map((r) => [r.status, r.n]));
      return (byStatus.completed ?? 0) + (byStatus.compensated ?? 0) === orders.length ? byStatus : undefined;
    },
    120_000,
  );
  assert.deepEqual(statuses, { completed: 15, compensated: 5 });

  const effects = await db.sql<{ order_id: string; actions: string[] }[]>`
    SELECT order_id, array_agg(participant || ':' || action ORDER BY participant, action) AS actions
    FROM test_saga_effect GROUP BY order_id`;
  const byOrder = new Map(effects.map((e) => [e.order_id, e.actions]));
  for (const o of orders) {
    const expected =
      o.amount > 1000
        ? ['inventory:release', 'inventory:reserve']
        : ['inventory:reserve', 'payments:charge', 'shipping:ship'];
    assert.deepEqual(byOrder.get(o.orderId), expected, `effects of ${o.orderId}`);
  }
  const [ignored] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM saga_reply_ignored`;
  assert.equal(ignored!.n, 0, 'no reply was stale or malformed');
  const [parked] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_parked`;
  assert.equal(parked!.n, 0, 'every step and reply stream arrived in version order, nothing waits');
});
