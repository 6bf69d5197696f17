import type { Queryable } from '../db/connect.ts';

export interface GapRow {
  consumer_name: string;
  aggregate_id: string;
  /** The version the consumer waits for (last applied + 1). */
  expected_version: number;
  parked_versions: number[];
  oldest_parked_at: Date;
  age_ms: number;
  blocked: boolean;
}

/**
 * Aggregates with parked events older than a threshold: the version gaps that did not close by themselves.
 * Parameters: consumer (null = all), threshold ms, limit. Rows returned: one per (consumer, aggregate), oldest
 * first. Locks: none.
 */
export async function parkedGaps(
  sql: Queryable,
  consumer: string | null,
  olderThanMs: number,
  limit: number,
): Promise<GapRow[]> {
  const rows = await sql<
    Array<
      Omit<GapRow, 'expected_version' | 'parked_versions' | 'age_ms'> & {
        expected_version: string;
        parked_versions: string[];
        age_ms: string;
      }
    >
  >`
    SELECT p.consumer_name, p.aggregate_id, coalesce(v.last_version, 0) + 1 AS expected_version,
           array_agg(p.aggregate_version ORDER BY p.aggregate_version)::text[] AS parked_versions,
           min(p.parked_at) AS oldest_parked_at,
           (extract(epoch FROM now() - min(p.parked_at)) * 1000)::bigint AS age_ms,
           bool_or(b.aggregate_id IS NOT NULL) AS blocked
    FROM message_parked p
    LEFT JOIN consumer_aggregate_version v ON v.consumer_name = p.consumer_name AND v.aggregate_id = p.aggregate_id
    LEFT JOIN consumer_blocked_aggregate b ON b.consumer_name = p.consumer_name AND b.aggregate_id = p.aggregate_id
    WHERE (${consumer}::text IS NULL OR p.consumer_name = ${consumer}::text)
    GROUP BY p.consumer_name, p.aggregate_id, v.last_version
    HAVING min(p.parked_at) <= now() - ${olderThanMs} * interval '1 millisecond'
    ORDER BY min(p.parked_at)
    LIMIT ${limit}`;
  return rows.map((r) => ({
    ...r,
    expected_version: Number(r.expected_version),
    parked_versions: r.parked_versions.map(Number),
    age_ms: Number(r.age_ms),
  }));
}

/**
 * Sends versions [from, to] of an aggregate again: their outbox rows go back to pending, due now, so a relay
 * publishes them once more with the same event ids (every consumer that has them absorbs the duplicate).
 * Rows in flight (pending, publishing) are left alone. Found through the key registry (message_outbox_key), one
 * partition probe per version. Parameters: aggregate, from, to. Rows returned: the versions re-queued. Locks:
 * those outbox rows.
 */
export async function requeueOutboxVersions(
  sql: Queryable,
  aggregateId: string,
  from: number,
  to: number,
): Promise<number[]> {
  const rows = await sql<{ aggregate_version: string }[]>`
    UPDATE message_outbox o
    SET status = 'pending', available_at = now(), lease_until = NULL, lease_owner = NULL
    FROM message_outbox_key k
    WHERE k.aggregate_id = ${aggregateId} AND k.aggregate_version BETWEEN ${from} AND ${to}
      AND o.event_id = k.event_id AND o.status IN ('published', 'failed')
    RETURNING o.aggregate_version::text`;
  return rows.map((r) => Number(r.aggregate_version)).sort((a, b) => a - b);
}
