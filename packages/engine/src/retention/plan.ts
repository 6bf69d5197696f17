import type { Sql } from '../db/connect.ts';
import { listPartitions, PARTITIONED_TABLES, type PartitionedTable } from '../queries/partitions.ts';
import { partitionHolds, type PartitionHolds } from '../queries/retention-partitions.ts';
import { type RetentionPolicy, windowDays } from './policy.ts';

/** A partition whose whole range is past its table's window. */
export interface RetentionCandidate {
  partition: string;
  from: Date | null;
  to: Date;
  /** The planner's estimate; the run records the exact count it archives. */
  rows: number;
  bytes: number;
}

/** A partition past its window that must stay for now, and why. */
export interface HeldPartition extends RetentionCandidate {
  reason: string;
}

/** One table under the policy: what it holds now, what would leave, what stays past its window. */
export interface TablePlan {
  table: PartitionedTable;
  /** Null: kept forever. */
  windowDays: number | null;
  /** Rows older than this may leave (now − window); null when kept forever. */
  cutoff: Date | null;
  before: { partitions: number; rows: number; bytes: number; oldest: Date | null };
  after: { partitions: number; rows: number; bytes: number; oldest: Date | null };
  candidates: RetentionCandidate[];
  held: HeldPartition[];
  /** Rows in the default partition (ids outside every range): swept by hand for now. */
  defaultRows: number;
}

/**
 * The plan of a retention run at `now`: per partitioned table, the range partitions whose end is at or before
 * now − window, split into candidates and held ones (unpublished or failed outbox rows, rows written or published
 * inside the window), with rows and bytes before and after. Reads catalog estimates and scans the candidates for
 * recent rows; changes nothing.
 */
export async function planRetention(sql: Sql, policy: RetentionPolicy, now: Date): Promise<TablePlan[]> {
  const plans: TablePlan[] = [];
  for (const table of PARTITIONED_TABLES) {
    const days = windowDays(policy, table);
    const cutoff = days === null ? null : new Date(now.getTime() - days * 86_400_000);
    const partitions = await listPartitions(sql, table);
    const candidates: RetentionCandidate[] = [];
    const held: HeldPartition[] = [];
    for (const p of partitions) {
      if (cutoff === null || p.isDefault || p.to === null || p.to.getTime() > cutoff.getTime()) continue;
      const entry = { partition: p.partition, from: p.from, to: p.to, rows: p.rows, bytes: p.bytes };
      const reason = holdReason(await partitionHolds(sql, table, p.partition, cutoff));
      if (reason) held.push({ ...entry, reason });
      else candidates.push(entry);
    }
    const leaving = new Set(candidates.map((c) => c.partition));
    const staying = partitions.filter((p) => !leaving.has(p.partition));
    const defaultRows = partitions.find((p) => p.isDefault)?.rows ?? 0;
    plans.push({
      table,
      windowDays: days,
      cutoff,
      before: sizes(partitions),
      after: sizes(staying),
      candidates,
      held,
      defaultRows,
    });
  }
  return plans;
}

/** Why a partition must stay, in an operator's words, or null when nothing holds it. */
export function holdReason(h: PartitionHolds): string | null {
  const parts: string[] = [];
  const n = (count: number) => (count >= 1000 ? '1,000+' : String(count));
  if (h.unpublished > 0) parts.push(`${n(h.unpublished)} rows not yet published (the relay still owes them)`);
  if (h.failed > 0) parts.push(`${n(h.failed)} failed rows (replay or skip them first)`);
  if (h.recent > 0) parts.push(`${n(h.recent)} rows written or published inside the window`);
  return parts.length === 0 ? null : parts.join('; ');
}

function sizes(
  partitions: Array<{ rows: number; bytes: number; from: Date | null; to: Date | null; isDefault: boolean }>,
) {
  const ranges = partitions.filter((p) => !p.isDefault && p.rows > 0);
  return {
    partitions: partitions.length,
    rows: partitions.reduce((a, p) => a + p.rows, 0),
    bytes: partitions.reduce((a, p) => a + p.bytes, 0),
    oldest: ranges.length === 0 ? null : (ranges[0]!.from ?? null),
  };
}
