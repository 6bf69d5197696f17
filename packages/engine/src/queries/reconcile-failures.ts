import type { Queryable } from '../db/connect.ts';

export interface AgedFailure {
  failure_id: number;
  consumer_name: string;
  event_id: string | null;
  aggregate_id: string | null;
  aggregate_version: number | null;
  error_code: string;
  first_failed_at: Date;
}

/**
 * Open failures first seen before the cutoff, keyset-paged by id. Parameters: cutoff, last id seen, limit.
 * Locks: none.
 */
export async function openFailuresBefore(
  sql: Queryable,
  cutoff: Date,
  afterId: number,
  limit: number,
): Promise<AgedFailure[]> {
  const rows = await sql<
    Array<
      Omit<AgedFailure, 'failure_id' | 'aggregate_version'> & { failure_id: string; aggregate_version: string | null }
    >
  >`
    SELECT failure_id::text, consumer_name, event_id::text, aggregate_id, aggregate_version::text, error_code,
           first_failed_at
    FROM message_failure
    WHERE status = 'open' AND first_failed_at <= ${cutoff} AND failure_id > ${afterId}
    ORDER BY failure_id LIMIT ${limit}`;
  return rows.map((r) => ({
    ...r,
    failure_id: Number(r.failure_id),
    aggregate_version: r.aggregate_version === null ? null : Number(r.aggregate_version),
  }));
}

export interface AgedGap {
  consumer_name: string;
  aggregate_id: string;
  /** The version the consumer waits for (last applied + 1). */
  expected_version: number;
  first_parked: number;
  parked: number;
  oldest_parked_at: Date;
  blocked: boolean;
}

/**
 * Aggregates with events parked since before the cutoff (a version gap that did not close), keyset-paged by
 * (consumer, aggregate). Parameters: cutoff, last (consumer, aggregate) seen, limit. Locks: none.
 */
export async function parkedGapsBefore(
  sql: Queryable,
  cutoff: Date,
  after: { consumer: string; aggregateId: string } | null,
  limit: number,
): Promise<AgedGap[]> {
  const rows = await sql<Array<Record<string, string | boolean | Date>>>`
    SELECT p.consumer_name, p.aggregate_id, (coalesce(max(v.last_version), 0) + 1)::text AS expected_version,
           min(p.aggregate_version)::text AS first_parked, count(*)::text AS parked,
           min(p.parked_at) AS oldest_parked_at, bool_or(b.aggregate_id IS NOT NULL) AS blocked
    FROM message_parked p
    LEFT JOIN consumer_aggregate_version v ON v.consumer_name = p.consumer_name AND v.aggregate_id = p.aggregate_id
    LEFT JOIN consumer_blocked_aggregate b ON b.consumer_name = p.consumer_name AND b.aggregate_id = p.aggregate_id
    ${after === null ? sql`` : sql`WHERE (p.consumer_name, p.aggregate_id) > (${after.consumer}, ${after.aggregateId})`}
    GROUP BY p.consumer_name, p.aggregate_id
    HAVING min(p.parked_at) <= ${cutoff}
    ORDER BY p.consumer_name, p.aggregate_id
    LIMIT ${limit}`;
  return rows.map((r) => ({
    consumer_name: r.consumer_name as string,
    aggregate_id: r.aggregate_id as string,
    expected_version: Number(r.expected_version),
    first_parked: Number(r.first_parked),
    parked: Number(r.parked),
    oldest_parked_at: r.oldest_parked_at as Date,
    blocked: r.blocked as boolean,
  }));
}

/** Whether a failure is still open. Parameters: id. Locks: none. */
export async function failureIsOpen(sql: Queryable, failureId: number): Promise<boolean> {
  const rows = await sql`SELECT 1 FROM message_failure WHERE failure_id = ${failureId} AND status = 'open'`;
  return rows.length > 0;
}

/** Which of the given failures are still open. Parameters: ids. Returns: the open ones. Locks: none. */
export async function openFailureIds(sql: Queryable, failureIds: readonly number[]): Promise<number[]> {
  if (failureIds.length === 0) return [];
  const rows = await sql<{ id: string }[]>`
    SELECT failure_id::text AS id FROM message_failure
    WHERE failure_id = ANY (${[...failureIds]}::bigint[]) AND status = 'open'`;
  return rows.map((r) => Number(r.id));
}
