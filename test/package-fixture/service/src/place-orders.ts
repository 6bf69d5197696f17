// The service's write path: each order and its event commit in one transaction, or neither does.
import { connect, createWaker, enqueue, transaction } from '@postbox/engine';

const sql = connect({ url: process.env.DATABASE_URL!, max: 4 });
const waker = createWaker(sql); // after each commit, relays are nudged at once (they also poll)
const topic = process.env.SHOP_TOPIC!;
const count = Number(process.argv[2] ?? 10);
const first = Number(process.argv[3] ?? 1);
try {
  for (let i = first; i < first + count; i++) {
    const orderId = `order-${i}`;
    await transaction(sql, waker, async (tx) => {
      await tx`INSERT INTO shop_order (order_id, amount) VALUES (${orderId}, ${i * 100})`;
      await enqueue(
        tx,
        { event_type: 'OrderPlaced', aggregate_id: orderId, aggregate_version: 1, data: { orderId, amount: i * 100 } },
        { topic },
      );
    });
  }
  // A rolled-back transaction leaves neither the order nor its event.
  await transaction(sql, waker, async (tx) => {
    await tx`INSERT INTO shop_order (order_id, amount) VALUES ('order-rolled-back', 1)`;
    await enqueue(tx, { event_type: 'OrderPlaced', aggregate_id: 'order-rolled-back', aggregate_version: 1, data: {} }, { topic });
    throw new Error('rolled back on purpose');
  }).catch((err: unknown) => {
    if ((err as Error).message !== 'rolled back on purpose') throw err;
  });
  console.log(`placed ${count} orders on ${topic}`);
} finally {
  await waker.flush();
  await sql.end();
}
