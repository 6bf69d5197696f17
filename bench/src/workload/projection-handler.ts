// The bench consumers' handler module (loaded in the consume worker threads): the demo order projection, with the
// row's updated_at taken from clock_timestamp() when the handler runs, just before the consumer commits, so the
// latency scenario reads both ends of an event's trip from the database clock (outbox created_at → here).
// Both shapes a handler module can have: `handleBatch` writes a task's events in one statement (what the engine
// calls when a task applies several), the default export one event (a task of one, and the fallback when a
// batch rolled back). The consumer scenario also measures the default export alone
// (projection-handler.per-event.ts).
import type { BatchItem, Envelope, HandlerContext, Tx } from '@postbox/engine';

export default async function project(event: Envelope, tx: Tx, _context: HandlerContext): Promise<void> {
  await tx`
    INSERT INTO demo_order_projection (order_id, state, version, applied_count, updated_at)
    VALUES (${event.aggregate_id}, 'placed', ${event.aggregate_version}, 1, clock_timestamp())
    ON CONFLICT (order_id) DO UPDATE
    SET version = EXCLUDED.version, applied_count = demo_order_projection.applied_count + 1, updated_at = clock_timestamp()`;
}

/** The same upsert for a task's events at once: distinct aggregates, so no row is touched twice. */
export async function handleBatch(batch: readonly BatchItem[], tx: Tx): Promise<void> {
  const ids = batch.map((b) => b.event.aggregate_id);
  const versions = batch.map((b) => b.event.aggregate_version);
  await tx`
    INSERT INTO demo_order_projection (order_id, state, version, applied_count, updated_at)
    SELECT id, 'placed', v, 1, clock_timestamp() FROM unnest(${ids}::text[], ${versions}::bigint[]) AS t(id, v)
    ON CONFLICT (order_id) DO UPDATE
    SET version = EXCLUDED.version, applied_count = demo_order_projection.applied_count + 1, updated_at = clock_timestamp()`;
}
