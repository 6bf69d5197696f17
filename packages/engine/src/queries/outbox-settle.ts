import type { Queryable } from '../db/connect.ts';

export interface PublishedPosition {
  event_id: string;
  partition: number;
  offset: string;
}

/**
 * Marks confirmed rows published and stores their broker position, in one statement for the batch.
 * The broker confirmed them, so this is true whoever holds the lease now. Locks: the rows.
 */
export async function markPublished(sql: Queryable, positions: PublishedPosition[]): Promise<number> {
  if (positions.length === 0) return 0;
  const result = await sql`
    UPDATE message_outbox AS o
    SET status = 'published', published_at = now(), lease_until = NULL,
        broker_partition = v.partition, broker_offset = v.broker_offset, last_error = NULL
    FROM unnest(${positions.map((p) => p.event_id)}::uuid[], ${positions.map((p) => p.partition)}::int[],
                ${positions.map((p) => p.offset)}::bigint[]) AS v(event_id, partition, broker_offset)
    WHERE o.event_id = v.event_id AND o.status <> 'published'`;
  return result.count;
}

/**
 * Returns rows to `pending`, due after `delayMs` (the backoff), recording why. Only rows this relay still leases:
 * a row reclaimed by another relay is that relay's now. Locks: the rows.
 */
export async function reschedule(
  sql: Queryable,
  eventIds: string[],
  owner: string,
  delayMs: number,
  error: string,
): Promise<number> {
  if (eventIds.length === 0) return 0;
  const result = await sql`
    UPDATE message_outbox
    SET status = 'pending', lease_until = NULL, last_error = ${error},
        available_at = now() + ${delayMs} * interval '1 millisecond'
    WHERE event_id = ANY(${eventIds}::uuid[]) AND status = 'publishing' AND lease_owner = ${owner}`;
  return result.count;
}

/** Ends rows in `failed` with the error (permanent error, or the attempt budget is spent). Locks: the rows. */
export async function markFailed(sql: Queryable, eventIds: string[], owner: string, error: string): Promise<number> {
  if (eventIds.length === 0) return 0;
  const result = await sql`
    UPDATE message_outbox
    SET status = 'failed', lease_until = NULL, last_error = ${error}
    WHERE event_id = ANY(${eventIds}::uuid[]) AND status = 'publishing' AND lease_owner = ${owner}`;
  return result.count;
}

/**
 * Hands back every lease this relay still holds (graceful stop, after in-flight batches settled): such rows
 * were claimed but never settled, so they are pending again at once instead of after the lease. Locks: the rows.
 */
export async function releaseLeases(sql: Queryable, owner: string): Promise<number> {
  const result = await sql`
    UPDATE message_outbox
    SET status = 'pending', lease_until = NULL
    WHERE status = 'publishing' AND lease_owner = ${owner}`;
  return result.count;
}
