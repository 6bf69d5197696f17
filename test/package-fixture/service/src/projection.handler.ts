// Applied once per event: the inbox row Postbox writes and this insert commit in the same transaction.
import type { Envelope, HandlerContext, Tx } from '@postbox/engine';

export default async function project(event: Envelope, tx: Tx, _context: HandlerContext): Promise<void> {
  const { orderId, amount } = event.data as { orderId: string; amount: number };
  await tx`INSERT INTO shop_order_projection (order_id, amount) VALUES (${orderId}, ${amount})
    ON CONFLICT (order_id) DO UPDATE SET applied = shop_order_projection.applied + 1`;
}
