import type { Queryable } from '../db/connect.ts';
import type { PartitionedTable } from './partitions.ts';

/** The rows that keep a partition past its window in the table, counted up to 1,000 each. */
export interface PartitionHolds {
  /** Outbox rows not yet published (pending, publishing): the relay still owes them. */
  unpublished: number;
  /** Outbox rows failed for good: an operator replays or skips them first. */
  failed: number;
  /** Rows written or published inside the window (a republish, a consumer reading old events for the first time). */
  recent: number;
}

/**
 * What holds a partition: the outbox's unfinished rows read from the partial ready and failed indexes, rows
 * inside the window (outbox `published_at`, inbox `processed_at`) from a scan, or with `indexedOnly` only what the
 * indexes answer (the re-check made under the detach's lock, which must stay short). Locks: none.
 */
export async function partitionHolds(
  sql: Queryable,
  table: PartitionedTable,
  partition: string,
  since: Date,
  indexedOnly = false,
): Promise<PartitionHolds> {
  const p = sql(partition);
  if (table === 'message_inbox') {
    // Under the detach's lock nothing is re-checked: a first delivery of an event this old in the milliseconds
    // since the plan is the one case, and the version gate still stops it from being applied twice.
    if (indexedOnly) return { unpublished: 0, failed: 0, recent: 0 };
    const [row] = await sql<{ recent: number }[]>`
      SELECT count(*)::int AS recent FROM (SELECT 1 FROM ${p} WHERE processed_at > ${since} LIMIT 1000) r`;
    return { unpublished: 0, failed: 0, recent: row!.recent };
  }
  const [row] = await sql<PartitionHolds[]>`
    SELECT (SELECT count(*) FROM (SELECT 1 FROM ${p} WHERE status IN ('pending', 'publishing') LIMIT 1000) u)::int
             AS unpublished,
           (SELECT count(*) FROM (SELECT 1 FROM ${p} WHERE status = 'failed' LIMIT 1000) f)::int AS failed,
           CASE WHEN ${indexedOnly} THEN 0
                ELSE (SELECT count(*) FROM (SELECT 1 FROM ${p} WHERE published_at > ${since} LIMIT 1000) r)::int
           END AS recent`;
  return row!;
}

/**
 * Takes a partition out of its table, in the caller's transaction: ACCESS EXCLUSIVE on the table until commit
 * (a default partition exists, so DETACH … CONCURRENTLY is not allowed; the caller sets a short lock_timeout).
 * The detached table keeps its rows and indexes under its own name. Locks: the table and the partition.
 */
export async function detachPartition(tx: Queryable, table: PartitionedTable, partition: string): Promise<void> {
  await tx`ALTER TABLE ${tx(table)} DETACH PARTITION ${tx(partition)}`;
}

/** Exact rows of a detached partition (frozen: nothing writes it). Locks: none. */
export async function countRows(sql: Queryable, partition: string): Promise<number> {
  const [row] = await sql<{ n: string }[]>`SELECT count(*)::text AS n FROM ${sql(partition)}`;
  return Number(row!.n);
}

/** Whether a table of that name exists, and whether it is a partition again (re-attached by hand). Locks: none. */
export async function tableState(sql: Queryable, name: string): Promise<'missing' | 'detached' | 'attached'> {
  const [row] = await sql<{ state: 'missing' | 'detached' | 'attached' }[]>`
    SELECT CASE WHEN c.oid IS NULL THEN 'missing' WHEN c.relispartition THEN 'attached' ELSE 'detached' END AS state
    FROM (SELECT to_regclass(${name}) AS oid) r LEFT JOIN pg_class c ON c.oid = r.oid`;
  return row!.state;
}

/** The column names of a table, in order (the archive's header and manifest). Locks: none. */
export async function tableColumns(sql: Queryable, name: string): Promise<string[]> {
  const rows = await sql<{ attname: string }[]>`
    SELECT attname FROM pg_attribute WHERE attrelid = ${name}::regclass AND attnum > 0 AND NOT attisdropped
    ORDER BY attnum`;
  return rows.map((r) => r.attname);
}

/** Drops a detached partition, in the caller's transaction (no lock on the table it left). */
export async function dropDetached(tx: Queryable, partition: string): Promise<void> {
  await tx`DROP TABLE ${tx(partition)}`;
}

/**
 * The (aggregate, version) keys of a dropped outbox range, except each aggregate's highest version: the registry
 * then holds one row per aggregate beyond the window, and the head version of an aggregate whose row was archived
 * still reads as emitted (reconciliation does not write it again). A key whose row is still somewhere (an old id
 * written since into the default partition) stays. One statement, in the drop's transaction. Returns: keys deleted. Locks:
 * those key rows.
 */
export async function pruneOutboxKeys(sql: Queryable, from: Date | null, to: Date): Promise<number> {
  const rows = await sql`
    DELETE FROM message_outbox_key k
    WHERE k.event_id < postbox_uuid_floor(${to})
      AND (${from}::timestamptz IS NULL OR k.event_id >= postbox_uuid_floor(${from}::timestamptz))
      AND EXISTS (SELECT 1 FROM message_outbox_key h
                  WHERE h.aggregate_id = k.aggregate_id AND h.aggregate_version > k.aggregate_version)
      AND NOT EXISTS (SELECT 1 FROM message_outbox o WHERE o.event_id = k.event_id)`;
  return rows.count;
}
