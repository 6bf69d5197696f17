import type { Sql } from '../db/connect.ts';
import { listPartitions, PARTITIONED_TABLES, type PartitionedTable } from '../queries/partitions.ts';
import { archiveTotals } from '../queries/retention-ledger.ts';
import { oldestEventTime } from '../queries/storage-oldest.ts';

/** One partitioned table's size now, and what retention has archived of it. */
export interface StorageTable {
  table: PartitionedTable;
  partitions: number;
  /** The planner's estimates summed over the partitions (exact after ANALYZE). */
  rows: number;
  bytes: number;
  /** The time of the oldest event id in the table (null when empty). */
  oldest: Date | null;
  /** Partitions made ahead of now (fewer than 2: no process keeps them, or their DDL cannot get its lock). */
  partitionsAhead: number;
  /** Rows in the default partition: ids outside every range. */
  defaultRows: number;
  archived: { partitions: number; rows: number; bytes: number };
}

/** Sizes of the outbox and the inbox, from the catalog, two index reads and the retention ledger. */
export async function storageReport(sql: Sql, now = new Date()): Promise<StorageTable[]> {
  const archived = new Map((await archiveTotals(sql)).map((a) => [a.table_name, a]));
  const out: StorageTable[] = [];
  for (const table of PARTITIONED_TABLES) {
    const parts = await listPartitions(sql, table);
    const a = archived.get(table);
    out.push({
      table,
      partitions: parts.length,
      rows: parts.reduce((s, p) => s + p.rows, 0),
      bytes: parts.reduce((s, p) => s + p.bytes, 0),
      oldest: await oldestEventTime(sql, table),
      partitionsAhead: parts.filter((p) => p.from !== null && p.from.getTime() > now.getTime()).length,
      defaultRows: parts.find((p) => p.isDefault)?.rows ?? 0,
      archived: { partitions: a?.partitions ?? 0, rows: a?.rows ?? 0, bytes: a?.bytes ?? 0 },
    });
  }
  return out;
}
