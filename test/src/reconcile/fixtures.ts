// Shared by the reconciliation tests: demo orders written the way the order service writes them (the business
// row and its event in one transaction), and the same change made the way a buggy code path makes it (no event).
import { type Envelope, enqueue, type Handler, type Sql } from '@postbox/engine';

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

/**
 * Hands the pending outbox events of the given topics to their handlers, in order, each in its own transaction,
 * as their consumers would (the saga tests need no broker to show a decision). Returns how many were handed.
 */
export async function deliverPending(
  sql: Sql,
  topics: string[],
  handlerOf: (topic: string) => Handler,
): Promise<number> {
  const rows = await sql<
    Array<{
      event_id: string;
      event_type: string;
      aggregate_id: string;
      aggregate_version: string;
      topic: string;
      payload: Buffer;
      extensions: Record<string, string> | null;
      seq: string;
    }>
  >`
    UPDATE message_outbox SET status = 'published', published_at = now()
    WHERE status = 'pending' AND topic = ANY (${topics})
    RETURNING event_id, event_type, aggregate_id, aggregate_version::text, topic, payload, extensions, seq`;
  const context = { consumer: 'test', partition: 0, offset: '0', attempt: 1 };
  for (const r of rows.sort((a, b) => Number(a.seq) - Number(b.seq))) {
    const envelope = {
      event_id: r.event_id,
      event_type: r.event_type,
      schema_version: 1,
      aggregate_id: r.aggregate_id,
      aggregate_version: Number(r.aggregate_version),
      occurred_at: new Date().toISOString(),
      producer: 'test',
      data: JSON.parse(r.payload.toString('utf8')),
      ...(r.extensions ? { extensions: r.extensions } : {}),
    } as Envelope;
    await sql.begin((tx) => handlerOf(r.topic)(envelope, tx, context));
  }
  return rows.length;
}
