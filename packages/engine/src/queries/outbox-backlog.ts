import type { Queryable } from '../db/connect.ts';

export interface OutboxBacklog {
  pending: number;
  publishing: number;
  published: number;
  failed: number;
  /** Age of the oldest row not yet published (pending or publishing), null when there is none. */
  oldestPendingAgeMs: number | null;
}

/**
 * Counts outbox rows by state (`publishing` as the message_outbox_state view derives it). The unpublished side reads the ready index; the published count is the
 * planner's estimate past 1M rows, since an exact count of an audit-window table costs a full scan.
 * Locks: none.
 */
export async function outboxBacklog(sql: Queryable): Promise<OutboxBacklog> {
  const [row] = await sql<
    { pending: number; publishing: number; failed: number; published: number; oldest_ms: number | null }[]
  >`
    WITH live AS (
      SELECT status, created_at FROM message_outbox_state WHERE stored_status IN ('pending', 'publishing')
    ), est AS (
      -- A partitioned table has no statistics of its own: its partitions (the leaves of its tree) have.
      SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint AS n
      FROM pg_partition_tree('message_outbox') t JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf
    )
    SELECT
      (SELECT count(*) FROM live WHERE status = 'pending')::int AS pending,
      (SELECT count(*) FROM live WHERE status = 'publishing')::int AS publishing,
      (SELECT count(*) FROM message_outbox WHERE status = 'failed')::int AS failed,
      CASE WHEN (SELECT n FROM est) > 1000000 THEN (SELECT n FROM est)::float8
           ELSE (SELECT count(*) FROM message_outbox WHERE status = 'published')::float8 END AS published,
      (SELECT extract(epoch FROM now() - min(created_at)) * 1000 FROM live)::float8 AS oldest_ms`;
  return {
    pending: row!.pending,
    publishing: row!.publishing,
    published: Number(row!.published),
    failed: row!.failed,
    oldestPendingAgeMs: row!.oldest_ms === null ? null : Math.round(row!.oldest_ms),
  };
}
