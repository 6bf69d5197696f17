// The bench consumers' handler module (loaded in the consume worker threads): the demo order projection, with the
// row's updated_at taken from clock_timestamp() when the handler runs, just before the consumer commits, so the
// latency scenario reads both ends of an event's trip from the database clock (outbox created_at → here).
import type { Envelope, HandlerContext, Tx } from '@postbox/engine';

export default async function project(event: Envelope, tx: Tx, _context: HandlerContext): Promise<void> {
  await tx`
    INSERT INTO demo_order_projection (order_id, state, version, applied_count, updated_at)
    VALUES (${event.aggregate_id}, 'placed', ${event.aggregate_version}, 1, clock_timestamp())
    ON CONFLICT (order_id) DO UPDATE
    SET version = EXCLUDED.version, applied_count = demo_order_projection.applied_count + 1, updated_at = clock_timestamp()`;
}
