import type { Queryable } from '../db/connect.ts';

export interface ScheduledRetryFact {
  consumer_name: string;
  event_id: string;
  aggregate_id: string;
  aggregate_version: number;
  attempt: number;
  next_attempt_at: Date;
  updated_at: Date;
}

/**
 * Scheduled retry ledger rows last written before a cutoff (a row written a moment ago may not have its job yet),
 * every consumer, keyset-paged by (consumer, event). Parameters: cutoff, the last (consumer, event) seen, limit.
 * Locks: none.
 */
export async function scheduledRetriesBefore(
  sql: Queryable,
  cutoff: Date,
  after: { consumer: string; eventId: string } | null,
  limit: number,
): Promise<ScheduledRetryFact[]> {
  const rows = await sql<Array<Omit<ScheduledRetryFact, 'aggregate_version'> & { aggregate_version: string }>>`
    SELECT consumer_name, event_id::text, aggregate_id, aggregate_version::text, attempt, next_attempt_at, updated_at
    FROM message_retry
    WHERE status = 'scheduled' AND updated_at <= ${cutoff}
      ${after === null ? sql`` : sql`AND (consumer_name, event_id) > (${after.consumer}, ${after.eventId}::uuid)`}
    ORDER BY consumer_name, event_id
    LIMIT ${limit}`;
  return rows.map((r) => ({ ...r, aggregate_version: Number(r.aggregate_version) }));
}

/** One ledger row as it is now, or undefined. Parameters: consumer, event. Locks: none. */
export async function scheduledRetry(
  sql: Queryable,
  consumer: string,
  eventId: string,
): Promise<{ status: string; attempt: number; next_attempt_at: Date } | undefined> {
  const [row] = await sql<{ status: string; attempt: number; next_attempt_at: Date }[]>`
    SELECT status, attempt, next_attempt_at FROM message_retry
    WHERE consumer_name = ${consumer} AND event_id = ${eventId}`;
  return row;
}

/**
 * The ledger rows of the given (consumer, event) pairs as they are now: status and when last written.
 * Parameters: the pairs. Returns: the rows that exist. Locks: none.
 */
export async function retryRowsAt(
  sql: Queryable,
  pairs: ReadonlyArray<{ consumer: string; eventId: string }>,
): Promise<Array<{ consumer_name: string; event_id: string; status: string; updated_at: Date }>> {
  if (pairs.length === 0) return [];
  return sql<Array<{ consumer_name: string; event_id: string; status: string; updated_at: Date }>>`
    SELECT r.consumer_name, r.event_id::text, r.status, r.updated_at
    FROM unnest(${pairs.map((p) => p.consumer)}::text[], ${pairs.map((p) => p.eventId)}::uuid[]) AS b(c, e)
    JOIN message_retry r ON r.consumer_name = b.c AND r.event_id = b.e`;
}
