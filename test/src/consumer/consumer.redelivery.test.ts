import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { enqueueMany } from '@postbox/engine';
import type { Relay } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { outboxCounts, startTestRelay } from '../support/relay.ts';
import { resetGroupToEarliest, startTestConsumer } from '../support/consumer.ts';

let db: TestDatabase;
let relay: Relay;
const topic = uniqueTopic('redelivery');
const ORDERS = 50;
const EVENTS = ORDERS * 4;
const DEMO_HANDLER = new URL('../../../packages/api/src/demo/projection-handler.ts', import.meta.url);

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 4);
  relay = await startTestRelay(db.sql);
});

after(async () => {
  await relay.stop();
  await db.drop();
});

const projection = () => db.sql<
  { order_id: string; state: string; amount_cents: number; version: string; applied_count: number }[]
>`
  SELECT order_id, state, amount_cents, version::text, applied_count FROM demo_order_projection ORDER BY order_id`;

test('everything delivered again, twice: projections unchanged, every redelivered event counted as a duplicate', async () => {
  for (let o = 0; o < ORDERS; o++) {
    const id = `order-${o}`;
    await db.sql.begin((tx) =>
      enqueueMany(
        tx,
        [
          {
            event_type: 'OrderPlaced',
            aggregate_id: id,
            aggregate_version: 1,
            data: { orderId: id, amountCents: 100 + o },
          },
          { event_type: 'OrderPaid', aggregate_id: id, aggregate_version: 2, data: { orderId: id, state: 'paid' } },
          {
            event_type: 'OrderShipped',
            aggregate_id: id,
            aggregate_version: 3,
            data: { orderId: id, state: 'shipped' },
          },
          {
            event_type: 'OrderDelivered',
            aggregate_id: id,
            aggregate_version: 4,
            data: { orderId: id, state: 'delivered' },
          },
        ],
        { topic, producer: 'orders-test' },
      ),
    );
  }
  relay.wake();
  await waitFor('every event published', async () => (await outboxCounts(db.sql)).published === EVENTS, 30_000);

  const input = { name: 'redelivery', topics: [topic], handler: DEMO_HANDLER };
  const first = await startTestConsumer(db.url, input);
  await waitFor('first delivery applied', async () => first.stats().applied + first.stats().drained === EVENTS, 40_000);
  await first.stop();
  const before = await projection();
  assert.equal(before.length, ORDERS);
  assert.ok(before.every((r) => r.state === 'delivered' && r.version === '4' && r.applied_count === 4));

  for (const round of [1, 2]) {
    await resetGroupToEarliest('postbox.redelivery', topic);
    const again = await startTestConsumer(db.url, input);
    await waitFor(`redelivery ${round} absorbed`, async () => again.stats().duplicates === EVENTS, 40_000).catch(
      (e: unknown) => {
        throw new Error(`${(e as Error).message}: ${JSON.stringify(again.stats())}`);
      },
    );
    await again.stop();
    const s = again.stats();
    assert.equal(s.applied + s.drained + s.parked + s.ignored + s.failed, 0, `round ${round}: nothing but duplicates`);
    assert.deepEqual(await projection(), before, `round ${round}: projection unchanged`);
  }
  const { inbox } = (
    await db.sql<
      { inbox: number }[]
    >`SELECT count(*)::int AS inbox FROM message_inbox WHERE consumer_name = 'redelivery'`
  )[0]!;
  assert.equal(inbox, EVENTS);
});
