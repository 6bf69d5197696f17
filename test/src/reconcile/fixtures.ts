// Shared by the reconciliation tests: demo orders written the way the order service writes them (the business
// row and its event in one transaction), and the same change made the way a buggy code path makes it (no event).
import { enqueue, type Sql } from '@postbox/engine';

/** An order placed through the normal path: demo_order at version 1 and its OrderPlaced event. */
export async function placeOrder(sql: Sql, topic: string, orderId: string, amountCents = 1000): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`INSERT INTO demo_order (order_id, state, amount_cents, version) VALUES (${orderId}, 'placed', ${amountCents}, 1)`;
    await enqueue(
      tx,
      { event_type: 'OrderPlaced', aggregate_id: orderId, aggregate_version: 1, data: { orderId, amountCents } },
      { topic, producer: 'demo-orders' },
    );
  });
}

/** An order paid through a code path that bypassed enqueue: the business row moves, no event is written. */
export async function payWithoutEvent(sql: Sql, orderId: string): Promise<void> {
  await sql`UPDATE demo_order SET state = 'paid', version = version + 1, updated_at = now() WHERE order_id = ${orderId}`;
}

export async function count(sql: Sql, query: string, params: unknown[] = []): Promise<number> {
  const [row] = await sql.unsafe<{ n: number }[]>(`SELECT count(*)::int AS n FROM (${query}) q`, params as never[]);
  return row!.n;
}

/** An order paid through the normal path: version 2 and its OrderPaid event in one transaction. */
export async function payOrder(sql: Sql, topic: string, orderId: string): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`UPDATE demo_order SET state = 'paid', version = 2, updated_at = now() WHERE order_id = ${orderId} AND version = 1`;
    await enqueue(
      tx,
      { event_type: 'OrderPaid', aggregate_id: orderId, aggregate_version: 2, data: { orderId, state: 'paid' } },
      { topic, producer: 'demo-orders' },
    );
  });
}
