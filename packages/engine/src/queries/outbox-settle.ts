import type { Queryable } from '../db/connect.ts';

export interface PublishedPosition {
  event_id: string;
  partition: number;
  /** Null on brokers without positions (RabbitMQ queues). */
  offset: string | null;
  /** The attempt that published it (the claim's count). */
  attempts: number;
}

/** A claimed row being settled, with the number of the attempt that just ended. */
export interface SettledRow {
  event_id: string;
  attempts: number;
}

/**
 * Marks confirmed rows published with their broker position and attempt count, in one statement for the batch,
 * and ends the lanes' batch in flight (relay_lane_inflight, where `owner` sent it). The broker confirmed them, so
 * this is true whoever holds the lane now. Returns: the rows marked. Locks: the rows and the lanes' in-flight rows.
 */
export async function markPublished(
  sql: Queryable,
  positions: PublishedPosition[],
  lanes: number[],
  owner: string,
): Promise<number> {
  if (positions.length === 0) return 0;
  const [row] = await sql<{ n: number }[]>`
    WITH marked AS (
      UPDATE message_outbox AS o
      SET status = 'published', published_at = now(), lease_until = NULL, attempts = v.attempts,
          broker_partition = v.partition, broker_offset = v.broker_offset, last_error = NULL
      FROM unnest(${positions.map((p) => p.event_id)}::uuid[], ${positions.map((p) => p.partition)}::int[],
                  ${positions.map((p) => p.offset)}::bigint[], ${positions.map((p) => p.attempts)}::int[])
           AS v(event_id, partition, broker_offset, attempts)
      WHERE o.event_id = v.event_id AND o.status <> 'published'
      RETURNING 1
    ), settled AS (
      UPDATE relay_lane_inflight SET sending_until = NULL
      WHERE lane = ANY (${lanes}::smallint[]) AND owner = ${owner}
    )
    SELECT count(*)::int AS n FROM marked`;
  return row!.n;
}

/**
 * Ends the lanes' batch in flight without marking anything (a cycle in which nothing was confirmed, after its
 * rows were rescheduled or failed). Locks: the lanes' in-flight rows.
 */
export async function endSending(sql: Queryable, lanes: number[], owner: string): Promise<void> {
  await sql`
    UPDATE relay_lane_inflight SET sending_until = NULL
    WHERE lane = ANY (${lanes}::smallint[]) AND owner = ${owner} AND sending_until IS NOT NULL`;
}

/**
 * Returns rows to `pending`, due after `delayMs` (the backoff), recording why and the attempt that failed. Only
 * rows of lanes this relay still holds: a lane taken over is the new owner's now. Locks: the rows.
 */
export async function reschedule(
  sql: Queryable,
  rows: SettledRow[],
  owner: string,
  delayMs: number,
  error: string,
): Promise<number> {
  if (rows.length === 0) return 0;
  const result = await sql`
    UPDATE message_outbox AS o
    SET status = 'pending', lease_until = NULL, last_error = ${error}, attempts = v.attempts,
        available_at = now() + ${delayMs} * interval '1 millisecond'
    FROM unnest(${rows.map((r) => r.event_id)}::uuid[], ${rows.map((r) => r.attempts)}::int[]) AS v(event_id, attempts)
    WHERE o.event_id = v.event_id AND o.status IN ('pending', 'publishing')
      AND o.lane IN (SELECT lane FROM relay_lane WHERE owner = ${owner})`;
  return result.count;
}

/**
 * Makes the pending rows of these lanes due now that wait out a backoff a failed publish earned (the broker
 * answers again). Only lanes `owner` holds. Returns: the rows made due. Locks: those rows.
 */
export async function resumeLanes(sql: Queryable, lanes: number[], owner: string): Promise<number> {
  if (lanes.length === 0) return 0;
  const result = await sql`
    UPDATE message_outbox SET available_at = now()
    WHERE lane = ANY (${lanes}::smallint[]) AND status = 'pending' AND available_at > now()
      AND lane IN (SELECT lane FROM relay_lane WHERE owner = ${owner} AND lease_until > now())`;
  return result.count;
}

/**
 * Ends rows in `failed` with the error and the attempt that failed (permanent error, or the attempt budget is
 * spent). Only rows of lanes this relay still holds. Locks: the rows.
 */
export async function markFailed(sql: Queryable, rows: SettledRow[], owner: string, error: string): Promise<number> {
  if (rows.length === 0) return 0;
  const result = await sql`
    UPDATE message_outbox AS o
    SET status = 'failed', lease_until = NULL, last_error = ${error}, attempts = v.attempts
    FROM unnest(${rows.map((r) => r.event_id)}::uuid[], ${rows.map((r) => r.attempts)}::int[]) AS v(event_id, attempts)
    WHERE o.event_id = v.event_id AND o.status IN ('pending', 'publishing')
      AND o.lane IN (SELECT lane FROM relay_lane WHERE owner = ${owner})`;
  return result.count;
}

/**
 * Hands back whatever this relay still has in flight (graceful stop, after in-flight batches settled): a batch
 * never settled ends now, so the lane's next owner need not wait out its lease. Returns: the lanes whose batch
 * ended. Locks: those rows.
 */
export async function releaseLeases(sql: Queryable, owner: string): Promise<number> {
  const result = await sql`
    UPDATE relay_lane_inflight SET sending_until = NULL
    WHERE owner = ${owner} AND sending_until IS NOT NULL`;
  return result.count;
}
