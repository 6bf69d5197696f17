import type { Queryable } from '@postbox/engine';

/**
 * Charges an order. Parameters: order id, amount. Returns: nothing. Locks: the order's payment row.
 * A second charge of one order adds to `charges` instead of failing, so a double effect stays visible.
 */
export async function chargePayment(sql: Queryable, orderId: string, amountCents: number): Promise<void> {
  await sql`
    INSERT INTO demo_payment (order_id, amount_cents, status, charges) VALUES (${orderId}, ${amountCents}, 'charged', 1)
    ON CONFLICT (order_id) DO UPDATE
    SET status = 'charged', charges = demo_payment.charges + 1, updated_at = now()`;
}

/** Records a declined payment (nothing charged). Parameters: order id, amount. Locks: the new row. */
export async function declinePayment(sql: Queryable, orderId: string, amountCents: number): Promise<void> {
  await sql`
    INSERT INTO demo_payment (order_id, amount_cents, status, charges) VALUES (${orderId}, ${amountCents}, 'declined', 0)
    ON CONFLICT (order_id) DO NOTHING`;
}

/** Refunds a charged order. Parameters: order id. Returns: true when it was charged. Locks: that row. */
export async function refundPayment(sql: Queryable, orderId: string): Promise<boolean> {
  const rows = await sql`
    UPDATE demo_payment SET status = 'refunded', updated_at = now()
    WHERE order_id = ${orderId} AND status = 'charged'
    RETURNING order_id`;
  return rows.length === 1;
}
