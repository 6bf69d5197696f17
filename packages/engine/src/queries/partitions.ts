import type { Queryable, Sql } from '../db/connect.ts';

const UNDEFINED_FUNCTION = '42883';

/** The tables Postbox partitions by time (migration 0017). */
export type PartitionedTable = 'message_outbox' | 'message_inbox';

export const PARTITIONED_TABLES: readonly PartitionedTable[] = ['message_outbox', 'message_inbox'];

/** The longest period a partition may cover: a year and a day (a longer one leaves retention nothing to drop). */
const MAX_PERIOD_SECONDS = 366 * 86_400;

/**
 * Makes the missing partitions of the next `ahead` periods, after the newest one, and returns how many it made
 * (postbox_premake_partitions, migration 0017; it serialises callers with a transaction advisory lock per table,
 * so processes doing it at once make each partition once). Only a role that owns the tables chooses the period
 * (`periodSeconds`): any other one makes them in the table's own period (postbox_premake, migration 0024, with
 * the owner's rights), so a narrow role cannot make partitions no retention can drop.
 * Locks: SHARE UPDATE EXCLUSIVE on the table while a partition is attached (writers go on), the default partition
 * while its rows of a new range move.
 */
export async function premakePartitions(
  sql: Queryable,
  table: PartitionedTable,
  periodSeconds: number,
  ahead: number,
): Promise<number> {
  if (!Number.isInteger(periodSeconds) || periodSeconds < 1 || periodSeconds > MAX_PERIOD_SECONDS)
    throw new RangeError(`premakePartitions takes a period of 1 s to 366 days, not ${periodSeconds} s`);
  if (await ownsPartitionedTables(sql)) {
    const [row] = await sql<{ made: number }[]>`
      SELECT postbox_premake_partitions(${table}::regclass, ${periodSeconds} * interval '1 second', ${ahead}) AS made`;
    return row!.made;
  }
  try {
    const [row] = await sql<{ made: number }[]>`SELECT postbox_premake(${table}, ${ahead}) AS made`;
    return row!.made;
  } catch (cause) {
    // A schema before 0024 while this version runs (a rolling upgrade): the 3-argument form of 0020.
    if ((cause as { code?: string }).code !== UNDEFINED_FUNCTION) throw cause;
    const [row] = await sql<{ made: number }[]>`
      SELECT postbox_premake(${table}, ${periodSeconds}, ${ahead}) AS made`;
    return row!.made;
  }
}

/** One partition of a partitioned table, as the catalog and its statistics describe it. */
export interface PartitionRow {
  partition: string;
  /** The range's start (null: MINVALUE, or the default partition). */
  from: Date | null;
  /** The range's end, exclusive (null for the default partition). */
  to: Date | null;
  isDefault: boolean;
  /** The planner's estimate (reltuples), 0 before the first ANALYZE. */
  rows: number;
  bytes: number;
}

/** The partitions of a table, oldest range first, the default last. Locks: none. */
export async function listPartitions(sql: Queryable, table: PartitionedTable): Promise<PartitionRow[]> {
  const rows = await sql<
    { partition: string; from: Date | null; to: Date | null; is_default: boolean; rows: string; bytes: string }[]
  >`
    SELECT p.partition::text AS partition, postbox_uuid_time(p.range_from) AS from, postbox_uuid_time(p.range_to) AS to,
           p.is_default, greatest(c.reltuples, 0)::bigint::text AS rows,
           pg_total_relation_size(p.partition)::text AS bytes
    FROM postbox_partitions(${table}::regclass) p JOIN pg_class c ON c.oid = p.partition
    ORDER BY p.is_default, p.range_to NULLS LAST`;
  return rows.map((r) => ({
    partition: r.partition,
    from: r.from,
    to: r.to,
    isDefault: r.is_default,
    rows: Number(r.rows),
    bytes: Number(r.bytes),
  }));
}

/**
 * A conversion left half done (0017 between its `bound` and `swap` steps): moves the table's legacy bound on when
 * it is less than a day away, so writers are never refused, and validates it again (no writer waits for that).
 * Returns: whether it moved the bound. Locks: the table for milliseconds (lock_timeout 500 ms).
 */
export async function extendLegacyBound(sql: Sql, table: PartitionedTable): Promise<boolean> {
  const [row] = await sql<{ moved: boolean }[]>`SELECT postbox_extend_legacy_bound(${table}::regclass) AS moved`;
  if (!row!.moved) return false;
  await sql`ALTER TABLE ${sql(table)} VALIDATE CONSTRAINT ${sql(`${table}_legacy_bound`)}`;
  return true;
}

/**
 * Gives rows of the default partition older than `olderThan` partitions of their own, one per period that holds
 * some and overlaps no range (postbox_sweep_default, migration 0019), so retention can archive and drop them.
 * Returns: how many partitions it made (at most 10 a call, migration 0023). Locks: the default partition for the call (lock_timeout
 * 500 ms), SHARE UPDATE EXCLUSIVE on the table while each is attached.
 */
export async function sweepDefault(sql: Queryable, table: PartitionedTable, olderThan: Date): Promise<number> {
  const [row] = await sql<{ made: number }[]>`SELECT postbox_sweep_default(${table}::regclass, ${olderThan}) AS made`;
  return row!.made;
}

/**
 * Whether the connected role owns the partitioned tables (or is a member of their owner): retention's detach and
 * drop need it, so a process connected as a narrower role (postbox_relay, postbox_consumer) leaves retention to the
 * owner. Locks: none.
 */
export async function ownsPartitionedTables(sql: Queryable): Promise<boolean> {
  const [row] = await sql<{ owns: boolean }[]>`
    SELECT bool_and(pg_has_role(current_user, c.relowner, 'USAGE')) AS owns
    FROM pg_class c WHERE c.oid IN ('message_outbox'::regclass, 'message_inbox'::regclass)`;
  return row?.owns === true;
}
