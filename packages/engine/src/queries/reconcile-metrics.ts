import type { Queryable } from '../db/connect.ts';

/**
 * What the reconciliation gauge shows (telemetry/metrics.ts, observeReconcileFindings), read at collection time:
 * the live findings (open, manual) per check. Uses the partial index of live findings, so it costs what is
 * broken now, not the history. Parameters: none. Returns: (check, status, count) rows. Locks: none.
 */
export async function liveFindingCounts(
  sql: Queryable,
): Promise<Array<{ check: string; status: 'open' | 'manual'; count: number }>> {
  const rows = await sql<Array<{ check: string; status: 'open' | 'manual'; n: string }>>`
    SELECT check_name AS "check", status, count(*)::text AS n FROM reconciliation_finding
    WHERE status IN ('open', 'manual') GROUP BY 1, 2`;
  return rows.map((r) => ({ check: r.check, status: r.status, count: Number(r.n) }));
}
