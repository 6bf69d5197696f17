import type { Queryable } from '../db/connect.ts';

/**
 * After a retried (or replayed) event went through: the aggregate is no longer blocked by it, and an open
 * failure of it (a replay's origin) is marked replayed. `eventIds`: the event and, for an edited replay, the one
 * it replaces. Locks: those rows.
 */
export async function settleRetriedFailure(
  tx: Queryable,
  consumer: string,
  aggregateId: string,
  eventIds: string[],
): Promise<void> {
  await tx`
    DELETE FROM consumer_blocked_aggregate
    WHERE consumer_name = ${consumer} AND aggregate_id = ${aggregateId} AND (event_id IS NULL OR event_id = ANY(${eventIds}::uuid[]))`;
  await tx`
    UPDATE message_failure SET status = 'replayed', replayed_at = now()
    WHERE consumer_name = ${consumer} AND status IN ('open', 'expired') AND event_id = ANY(${eventIds}::uuid[])`;
}
