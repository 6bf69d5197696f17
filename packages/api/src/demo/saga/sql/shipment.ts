import type { Queryable } from '@postbox/engine';

/** Ships an order. Parameters: order id, tracking id. Returns: nothing. Locks: the new row. */
export async function shipOrder(sql: Queryable, orderId: string, trackingId: string): Promise<void> {
  await sql`INSERT INTO demo_shipment (order_id, tracking_id) VALUES (${orderId}, ${trackingId})`;
}
