import type { Queryable } from '../db/connect.ts';
import { parkedGaps, requeueOutboxVersions, type GapRow } from '../queries/consumer-gaps.ts';

export type VersionGap = GapRow;

export interface GapReportOptions {
  /** @defaultValue all consumers */
  consumer?: string;
  /** Only gaps whose oldest parked event is at least this old. @defaultValue 60000 */
  olderThanMs?: number;
  /** @defaultValue 100 */
  limit?: number;
}

/** Parked aggregates whose gap has stayed open longer than the threshold (expected version, parked versions, age). */
export function reportGaps(sql: Queryable, options: GapReportOptions = {}): Promise<VersionGap[]> {
  return parkedGaps(sql, options.consumer ?? null, options.olderThanMs ?? 60_000, options.limit ?? 100);
}

export interface BackfillResult {
  consumer: string;
  aggregate_id: string;
  /** Versions whose outbox rows were set back to pending. */
  requeued: number[];
  /** Missing versions with no outbox row to re-send (produced elsewhere, or pruned): need an operator. */
  missing: number[];
}

/**
 * Back-fills gaps by re-publishing the missing versions (expected … first parked − 1) from the outbox. A blocked
 * aggregate is skipped: its gap is a failure in the failure store, closed by replay, not by re-sending.
 */
export async function backfillGaps(sql: Queryable, gaps: VersionGap[]): Promise<BackfillResult[]> {
  const out: BackfillResult[] = [];
  for (const gap of gaps) {
    if (gap.blocked || gap.parked_versions.length === 0) continue;
    const to = gap.parked_versions[0]! - 1;
    if (to < gap.expected_version) continue;
    const requeued = await requeueOutboxVersions(sql, gap.aggregate_id, gap.expected_version, to);
    const have = new Set(requeued);
    const missing: number[] = [];
    for (let v = gap.expected_version; v <= to; v++) if (!have.has(v)) missing.push(v);
    out.push({ consumer: gap.consumer_name, aggregate_id: gap.aggregate_id, requeued, missing });
  }
  return out;
}
