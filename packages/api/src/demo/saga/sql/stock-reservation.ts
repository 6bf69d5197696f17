import type { Queryable } from '@postbox/engine';

/**
 * Reserves stock for an order. Parameters: order id, quantity. Returns: nothing (a second reservation of one
 * order is a unique violation: the participant's step record makes sure it never comes). Locks: the new row.
 */
export async function reserveStock(sql: Queryable, orderId: string, quantity: number): Promise<void> {
  await sql`INSERT INTO demo_stock_reservation (order_id, quantity, status) VALUES (${orderId}, ${quantity}, 'reserved')`;
}

/** Releases an order's reservation. Parameters: order id. Returns: true when one was held. Locks: that row. */
export async function releaseStock(sql: Queryable, orderId: string): Promise<boolean> {
  const rows = await sql`
    UPDATE demo_stock_reservation SET status = 'released', updated_at = now()
    WHERE order_id = ${orderId} AND status = 'reserved'
    RETURNING order_id`;
  return rows.length === 1;
}
