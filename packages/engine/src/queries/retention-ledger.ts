import type { Queryable } from '../db/connect.ts';
import type { PartitionedTable } from './partitions.ts';

export type RetentionRunStatus = 'running' | 'finished' | 'failed' | 'skipped' | 'refused';
export type RetentionPartitionState = 'detached' | 'archived' | 'dropped';

/** Opens a run's ledger row. Returns: its id. Locks: none. */
export async function insertRetentionRun(
  sql: Queryable,
  r: { trigger: 'schedule' | 'cli'; actor: string; dryRun: boolean; policy: unknown; status?: RetentionRunStatus },
): Promise<number> {
  const [row] = await sql<{ run_id: string }[]>`
    INSERT INTO retention_run (trigger, actor, dry_run, policy, status, finished_at)
    VALUES (${r.trigger}, ${r.actor}, ${r.dryRun}, ${sql.json(r.policy as never)}, ${r.status ?? 'running'},
            CASE WHEN ${r.status ?? 'running'} = 'running' THEN NULL ELSE now() END)
    RETURNING run_id::text`;
  return Number(row!.run_id);
}

/** Closes a run: its status, what it found and did, the error that stopped it. Locks: that row. */
export async function finishRetentionRun(
  sql: Queryable,
  runId: number,
  status: Exclude<RetentionRunStatus, 'running'>,
  plan: unknown,
  error: string | null = null,
): Promise<void> {
  await sql`
    UPDATE retention_run SET status = ${status}, plan = ${sql.json(plan as never)}, error = ${error}, finished_at = now()
    WHERE run_id = ${runId}`;
}

/** When a retention run (any trigger) last finished, or null. Locks: none. */
export async function lastFinishedRun(sql: Queryable): Promise<Date | null> {
  const [row] = await sql<{ at: Date | null }[]>`
    SELECT max(finished_at) AS at FROM retention_run WHERE status = 'finished' AND NOT dry_run`;
  return row!.at;
}

/** When the last scheduled run finished, or null. Locks: none. */
export async function lastScheduledRun(sql: Queryable): Promise<Date | null> {
  const [row] = await sql<{ at: Date | null }[]>`
    SELECT max(started_at) AS at FROM retention_run WHERE trigger = 'schedule' AND status = 'finished'`;
  return row!.at;
}

export interface RetentionPartitionRow {
  table_name: PartitionedTable;
  partition: string;
  range_from: Date | null;
  range_to: Date;
  state: RetentionPartitionState;
  rows: number | null;
  bytes: number | null;
  archive_path: string | null;
  manifest: unknown;
  run_id: number;
}

/** Records where a partition taken out stands (a new row at `detached`, then its later states). Locks: that row. */
export async function recordPartition(
  sql: Queryable,
  p: Pick<RetentionPartitionRow, 'table_name' | 'partition' | 'range_from' | 'range_to' | 'state' | 'run_id'> &
    Partial<Pick<RetentionPartitionRow, 'rows' | 'bytes' | 'archive_path' | 'manifest'>>,
): Promise<void> {
  await sql`
    INSERT INTO retention_partition (table_name, partition, range_from, range_to, state, rows, bytes, archive_path,
                                     manifest, run_id)
    VALUES (${p.table_name}, ${p.partition}, ${p.range_from}, ${p.range_to}, ${p.state}, ${p.rows ?? null},
            ${p.bytes ?? null}, ${p.archive_path ?? null},
            ${p.manifest === undefined ? null : sql.json(p.manifest as never)}, ${p.run_id})
    ON CONFLICT (table_name, partition) DO UPDATE SET
      state = excluded.state, rows = coalesce(excluded.rows, retention_partition.rows),
      bytes = coalesce(excluded.bytes, retention_partition.bytes),
      archive_path = coalesce(excluded.archive_path, retention_partition.archive_path),
      manifest = coalesce(excluded.manifest, retention_partition.manifest),
      run_id = excluded.run_id, updated_at = now()`;
}

/** Partitions taken out and not yet dropped (a run stopped half-way), oldest first. Locks: none. */
export async function unfinishedPartitions(sql: Queryable): Promise<RetentionPartitionRow[]> {
  const rows = await sql<
    Array<
      Omit<RetentionPartitionRow, 'rows' | 'bytes' | 'run_id'> & {
        rows: string | null;
        bytes: string | null;
        run_id: string;
      }
    >
  >`
    SELECT table_name, partition, range_from, range_to, state, rows::text, bytes::text, archive_path, manifest,
           run_id::text
    FROM retention_partition WHERE state <> 'dropped' ORDER BY range_to`;
  return rows.map((r) => ({
    ...r,
    rows: r.rows === null ? null : Number(r.rows),
    bytes: r.bytes === null ? null : Number(r.bytes),
    run_id: Number(r.run_id),
  }));
}

/** What retention has archived: files and bytes, per table. Locks: none. */
export async function archiveTotals(
  sql: Queryable,
): Promise<Array<{ table_name: string; partitions: number; rows: number; bytes: number }>> {
  const rows = await sql<{ table_name: string; partitions: number; rows: string; bytes: string }[]>`
    SELECT table_name, count(*)::int AS partitions, coalesce(sum(rows), 0)::text AS rows,
           coalesce(sum((manifest -> 'file' ->> 'bytes')::bigint), 0)::text AS bytes
    FROM retention_partition WHERE state IN ('archived', 'dropped') GROUP BY table_name ORDER BY table_name`;
  return rows.map((r) => ({ ...r, rows: Number(r.rows), bytes: Number(r.bytes) }));
}
