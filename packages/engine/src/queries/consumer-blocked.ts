import type { Queryable } from '../db/connect.ts';

export type BlockReason = 'retrying' | 'failed';

export interface BlockedAggregate {
  consumer_name: string;
  aggregate_id: string;
  event_id: string | null;
  aggregate_version: number | null;
  reason: BlockReason;
  detail: string | null;
  blocked_at: Date;
  /** Later versions parked behind the block. */
  parked: number;
}

/**
 * Marks an aggregate blocked for a consumer: its head event waits for a retry ('retrying') or sits in the failure
 * store ('failed'); the version gate then parks its later versions. A block names its head event; the same head
 * moving from retrying to failed updates the reason, a block by another event is kept.
 * Parameters: consumer, block. Locks: the row.
 */
export async function blockAggregate(
  sql: Queryable,
  consumer: string,
  block: {
    aggregate_id: string;
    event_id: string | null;
    aggregate_version: number | null;
    reason: BlockReason;
    detail: string;
  },
): Promise<void> {
  await sql`
    INSERT INTO consumer_blocked_aggregate (consumer_name, aggregate_id, event_id, aggregate_version, reason, detail)
    VALUES (${consumer}, ${block.aggregate_id}, ${block.event_id}, ${block.aggregate_version}, ${block.reason}, ${block.detail.slice(0, 2000)})
    ON CONFLICT (consumer_name, aggregate_id) DO UPDATE SET reason = EXCLUDED.reason, detail = EXCLUDED.detail
    WHERE consumer_blocked_aggregate.event_id IS NOT DISTINCT FROM EXCLUDED.event_id`;
}

/** Blocked aggregates with their reason and parked count, oldest first. Parameters: consumer or null (all). */
export async function listBlocked(sql: Queryable, consumer: string | null, limit: number): Promise<BlockedAggregate[]> {
  return sql<BlockedAggregate[]>`
    SELECT b.consumer_name, b.aggregate_id, b.event_id, b.aggregate_version::int, b.reason, b.detail, b.blocked_at,
           (SELECT count(*)::int FROM message_parked p WHERE p.consumer_name = b.consumer_name AND p.aggregate_id = b.aggregate_id) AS parked
    FROM consumer_blocked_aggregate b
    WHERE ${consumer === null} OR b.consumer_name = ${consumer ?? ''}
    ORDER BY b.blocked_at
    LIMIT ${limit}`;
}
