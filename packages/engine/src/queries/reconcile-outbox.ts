import type { Queryable } from '../db/connect.ts';

/**
 * An outbox row as reconciliation sees it: where it stands, and since when. `archived`: the row left with its
 * partition past the audit window (retention); its key stays for each aggregate's head, so it reads as emitted.
 */
export interface OutboxFact {
  aggregate_id: string;
  aggregate_version: number;
  event_id: string;
  status: 'pending' | 'publishing' | 'published' | 'failed' | 'archived';
  /** Null once archived. */
  topic: string | null;
  created_at: Date;
  published_at: Date | null;
  last_error: string | null;
}

/**
 * The outbox rows of the given (aggregate, version) pairs — one page of a source of truth. Goes through the key
 * registry (message_outbox_key, migration 0016) to the row's event_id, so each lookup reads one partition.
 * Parameters: aggregate ids and versions (same length). Returns: the rows that exist (a pair without a row is
 * missing). Locks: none.
 */
export async function outboxRowsAt(
  sql: Queryable,
  pairs: ReadonlyArray<{ aggregateId: string; version: number }>,
): Promise<OutboxFact[]> {
  if (pairs.length === 0) return [];
  const rows = await sql<Array<Omit<OutboxFact, 'aggregate_version'> & { aggregate_version: string }>>`
    SELECT k.aggregate_id, k.aggregate_version::text, k.event_id, coalesce(o.status, 'archived') AS status, o.topic,
           coalesce(o.created_at, postbox_uuid_time(k.event_id)) AS created_at, o.published_at,
           left(o.last_error, 300) AS last_error
    FROM unnest(${pairs.map((p) => p.aggregateId)}::text[], ${pairs.map((p) => p.version)}::bigint[]) AS b(id, v)
    JOIN message_outbox_key k ON k.aggregate_id = b.id AND k.aggregate_version = b.v
    LEFT JOIN message_outbox o ON o.event_id = k.event_id
    -- A key without its row is archived only inside a range retention dropped; elsewhere the row is missing.
    WHERE o.event_id IS NOT NULL OR EXISTS (
      SELECT 1 FROM retention_partition r
      WHERE r.table_name = 'message_outbox' AND r.state = 'dropped'
        AND k.event_id < postbox_uuid_floor(r.range_to)
        AND (r.range_from IS NULL OR k.event_id >= postbox_uuid_floor(r.range_from)))`;
  return rows.map((r) => ({ ...r, aggregate_version: Number(r.aggregate_version) }));
}

/** One outbox row by (aggregate, version), or undefined. Locks: none. */
export async function outboxRowAt(
  sql: Queryable,
  aggregateId: string,
  version: number,
): Promise<OutboxFact | undefined> {
  const [row] = await outboxRowsAt(sql, [{ aggregateId, version }]);
  return row;
}

/**
 * Whether the outbox holds (or held: a key outlives its archived row) the event of (aggregate, version), in the
 * caller's transaction: what a re-emit command asks before it enqueues, so that it is idempotent. Locks: none (the
 * key registry refuses a second row anyway).
 */
export async function outboxHas(sql: Queryable, aggregateId: string, version: number): Promise<boolean> {
  const rows = await sql`
    SELECT 1 FROM message_outbox_key WHERE aggregate_id = ${aggregateId} AND aggregate_version = ${version}`;
  return rows.length > 0;
}
