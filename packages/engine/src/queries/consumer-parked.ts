import type { StoredRecord } from '../records/stored-record.ts';
import type { Queryable } from '../db/connect.ts';

export interface ParkedRow {
  aggregate_id: string;
  aggregate_version: number;
  event_id: string;
  expected_version: number;
  record: StoredRecord;
}

/**
 * Parks future versions until their gap fills (durable: a parked event counts as settled for offsets).
 * A second event claiming an already parked (aggregate, version) is not stored again.
 * Parameters: consumer, rows. Locks: the new rows (callers hold the aggregate's version row lock).
 */
export async function parkEvents(sql: Queryable, consumer: string, rows: ParkedRow[]): Promise<void> {
  if (rows.length === 0) return;
  await sql`
    INSERT INTO message_parked (consumer_name, aggregate_id, aggregate_version, event_id, topic, broker_partition,
                                broker_offset, record, expected_version)
    SELECT ${consumer}, a, v, e, t, p, o, r::jsonb, x
    FROM unnest(${rows.map((r) => r.aggregate_id)}::text[], ${rows.map((r) => r.aggregate_version)}::bigint[],
                ${rows.map((r) => r.event_id)}::uuid[], ${rows.map((r) => r.record.topic)}::text[],
                ${rows.map((r) => r.record.partition)}::int[], ${rows.map((r) => r.record.offset)}::bigint[],
                ${rows.map((r) => JSON.stringify(r.record))}::text[], ${rows.map((r) => r.expected_version)}::bigint[])
         AS u(a, v, e, t, p, o, r, x)
    ON CONFLICT (consumer_name, aggregate_id, aggregate_version) DO NOTHING`;
}

/**
 * Parked events of the given aggregates in version order: the drain candidates after an apply. The order is the
 * bigint column's (qualified): a bare `aggregate_version` there names the text output column, which sorts v10
 * before v4 and would stop every drain across a digit boundary.
 * Parameters: consumer, aggregate ids. Rows returned: parked rows. Locks: none (the version row lock covers them).
 */
export async function parkedOf(sql: Queryable, consumer: string, aggregateIds: string[]): Promise<ParkedRow[]> {
  if (aggregateIds.length === 0) return [];
  const rows = await sql<
    {
      aggregate_id: string;
      aggregate_version: string;
      event_id: string;
      expected_version: string;
      record: StoredRecord;
    }[]
  >`
    SELECT p.aggregate_id, p.aggregate_version::text, p.event_id, p.expected_version::text, p.record
    FROM message_parked p
    WHERE p.consumer_name = ${consumer} AND p.aggregate_id = ANY(${aggregateIds}::text[])
    ORDER BY p.aggregate_id, p.aggregate_version`;
  return rows.map((r) => ({
    ...r,
    aggregate_version: Number(r.aggregate_version),
    expected_version: Number(r.expected_version),
  }));
}

/** Deletes drained (or superseded) parked rows. Parameters: consumer, (aggregate, version) pairs. */
export async function deleteParked(
  sql: Queryable,
  consumer: string,
  keys: Array<{ aggregate_id: string; aggregate_version: number }>,
): Promise<void> {
  if (keys.length === 0) return;
  // `= ANY` as well as the join: the index scan reads these aggregates only, whatever the statistics
  // (consumer-version.ts, saveVersions).
  const aggregates = keys.map((k) => k.aggregate_id);
  await sql`
    DELETE FROM message_parked AS p
    USING unnest(${aggregates}::text[], ${keys.map((k) => k.aggregate_version)}::bigint[]) AS u(a, v)
    WHERE p.consumer_name = ${consumer} AND p.aggregate_id = ANY(${aggregates}::text[])
      AND p.aggregate_id = u.a AND p.aggregate_version = u.v`;
}
