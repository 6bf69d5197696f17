import type { Queryable } from '../db/connect.ts';

export interface FailureFilter {
  consumer?: string;
  errorCode?: string;
  eventType?: string;
  status?: 'open' | 'replayed' | 'skipped' | 'expired';
  since?: Date;
  until?: Date;
  ids?: number[];
}

export interface FailureSummary {
  failure_id: number;
  consumer_name: string;
  event_id: string | null;
  event_type: string | null;
  aggregate_id: string | null;
  aggregate_version: number | null;
  topic: string | null;
  broker_partition: number | null;
  broker_offset: string | null;
  error_code: string;
  error_detail: string;
  attempts: number;
  first_failed_at: Date;
  last_failed_at: Date;
  status: string;
  replayed_at: Date | null;
  /** The ring key that sealed the payload, null when it is stored in clear (or was purged). */
  key_id: string | null;
}

/**
 * Failures matching the filter, newest id first, keyset-paged by failure_id (stable under inserts).
 * Parameters: filter, page size, the last id of the previous page. Returns: summaries without payloads.
 * Locks: none.
 */
export async function listFailures(
  sql: Queryable,
  f: FailureFilter,
  limit: number,
  beforeId: number | null,
): Promise<FailureSummary[]> {
  const rows = await sql<FailureSummary[]>`
    SELECT failure_id::int, consumer_name, event_id, event_type, aggregate_id, aggregate_version::int, topic,
           broker_partition, broker_offset::text, error_code, error_detail, attempts, first_failed_at, last_failed_at,
           status, replayed_at, key_id
    FROM message_failure
    WHERE (${f.consumer ?? null}::text IS NULL OR consumer_name = ${f.consumer ?? null})
      AND (${f.errorCode ?? null}::text IS NULL OR error_code = ${f.errorCode ?? null})
      AND (${f.eventType ?? null}::text IS NULL OR event_type = ${f.eventType ?? null})
      AND (${f.status ?? null}::text IS NULL OR status = ${f.status ?? null})
      AND (${f.since ?? null}::timestamptz IS NULL OR last_failed_at >= ${f.since ?? null})
      AND (${f.until ?? null}::timestamptz IS NULL OR last_failed_at < ${f.until ?? null})
      AND (${f.ids ?? null}::bigint[] IS NULL OR failure_id = ANY(${f.ids ?? null}::bigint[]))
      AND (${beforeId}::bigint IS NULL OR failure_id < ${beforeId})
    ORDER BY failure_id DESC
    LIMIT ${limit}`;
  return [...rows];
}

export interface FailureDetail extends FailureSummary {
  sealed: Buffer | null;
  payload: Buffer | null;
  headers: Record<string, string> | null;
  envelope: unknown;
  /** Set when payload retention removed the payload and headers. */
  payload_purged_at: Date | null;
}

/**
 * One failure with its raw payload and headers, as stored: a sealed row's are in `sealed` (`openFailure` in
 * crypto/row-seal.ts opens them). Locks: the row when `forUpdate`.
 */
export async function readFailure(sql: Queryable, id: number, forUpdate = false): Promise<FailureDetail | undefined> {
  const [row] = await sql<FailureDetail[]>`
    SELECT failure_id::int, consumer_name, event_id, event_type, aggregate_id, aggregate_version::int, topic,
           broker_partition, broker_offset::text, error_code, error_detail, attempts, first_failed_at, last_failed_at,
           status, replayed_at, payload, headers, envelope, key_id, sealed, payload_purged_at
    FROM message_failure WHERE failure_id = ${id}
    ${forUpdate ? sql`FOR UPDATE` : sql``}`;
  return row;
}

/** Sets a failure's status (replayed, skipped, expired). Locks: the row. */
export async function setFailureStatus(
  sql: Queryable,
  id: number,
  status: 'replayed' | 'skipped' | 'expired',
): Promise<void> {
  await sql`
    UPDATE message_failure SET status = ${status}, replayed_at = CASE WHEN ${status} = 'replayed' THEN now() ELSE replayed_at END
    WHERE failure_id = ${id}`;
}

/**
 * The consumer's view of an aggregate, for replay checks: last applied version, whether it is blocked and by
 * which event, and how many later versions are parked. Locks: none.
 */
export async function aggregateState(
  sql: Queryable,
  consumer: string,
  aggregateId: string,
): Promise<{ last_version: number | null; blocked_by: string | null; parked: number }> {
  const [row] = await sql<{ last_version: number | null; blocked_by: string | null; parked: number }[]>`
    SELECT (SELECT last_version::int FROM consumer_aggregate_version WHERE consumer_name = ${consumer} AND aggregate_id = ${aggregateId}) AS last_version,
           (SELECT event_id::text FROM consumer_blocked_aggregate WHERE consumer_name = ${consumer} AND aggregate_id = ${aggregateId}) AS blocked_by,
           (SELECT count(*)::int FROM message_parked WHERE consumer_name = ${consumer} AND aggregate_id = ${aggregateId}) AS parked`;
  return row!;
}
