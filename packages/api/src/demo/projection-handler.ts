// The demo consumer's handler module (loaded in the consume worker threads): projects order events into
// demo_order_projection, in the engine's transaction. Every applied event bumps applied_count.
import { PermanentError, type Envelope, type HandlerContext, type Tx } from '@postbox/engine';

interface OrderData {
  orderId?: string;
  amountCents?: number;
  state?: string;
}

const STATES: Record<string, string> = {
  OrderPlaced: 'placed',
  OrderPaid: 'paid',
  OrderShipped: 'shipped',
  OrderDelivered: 'delivered',
};

export default async function project(event: Envelope, tx: Tx, _context: HandlerContext): Promise<void> {
  const data = (event.data ?? {}) as OrderData;
  const state = data.state ?? STATES[event.event_type];
  if (!state)
    throw new PermanentError(`demo projection does not know event type ${event.event_type}`, {
      code: 'unknown_event_type',
    });
  await tx`
    INSERT INTO demo_order_projection (order_id, state, amount_cents, version, applied_count)
    VALUES (${event.aggregate_id}, ${state}, ${data.amountCents ?? null}, ${event.aggregate_version}, 1)
    ON CONFLICT (order_id) DO UPDATE
    SET state = EXCLUDED.state, version = EXCLUDED.version,
        amount_cents = coalesce(EXCLUDED.amount_cents, demo_order_projection.amount_cents),
        applied_count = demo_order_projection.applied_count + 1, updated_at = now()`;
}
