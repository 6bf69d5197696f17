import type { Queryable } from '../db/connect.ts';
import type { Finding, FindingStatus, StoredFinding } from '../records/finding.ts';

const COLUMNS = `finding_id::int AS id, check_name AS "check", business_key AS key, kind, expected, observed, status,
  repair, first_run_id::int AS "firstRunId", last_run_id::int AS "lastRunId", first_seen_at AS "firstSeenAt",
  last_seen_at AS "lastSeenAt", closed_at AS "closedAt"`;

/**
 * Records a page of a run's findings: new ones inserted (open, or manual when no repair can act), known ones
 * updated (what was seen now, this run) — an ignored finding stays ignored; a manual one with a recorded verdict
 * (a repair pass's or an operator's `repair`) stays manual while its kind is the same, so the next run does not
 * hand it back to repairs; a repaired or resolved one seen again opens again (its repair did not take).
 * Parameters: check, run id, findings. Returns: how many were new and how many opened again. Locks: the
 * findings' rows.
 */
export async function upsertFindings(
  sql: Queryable,
  check: string,
  runId: number,
  findings: readonly Finding[],
): Promise<{ opened: number; reopened: number }> {
  if (findings.length === 0) return { opened: 0, reopened: 0 };
  const rows = findings.map((f) => ({
    key: f.key,
    kind: f.kind,
    expected: f.expected,
    observed: f.observed,
    status: f.repairable ? 'open' : 'manual',
  }));
  const result = await sql<{ inserted: boolean; was: FindingStatus | null }[]>`
    WITH input AS (
      SELECT * FROM jsonb_to_recordset(${sql.json(rows as never)})
        AS x(key text, kind text, expected jsonb, observed jsonb, status text)
    ), previous AS (
      SELECT business_key, status FROM reconciliation_finding
      WHERE check_name = ${check} AND business_key IN (SELECT key FROM input)
    )
    INSERT INTO reconciliation_finding AS f (check_name, business_key, kind, expected, observed, status, first_run_id,
                                             last_run_id)
    SELECT ${check}, key, kind, expected, observed, status, ${runId}, ${runId} FROM input
    ON CONFLICT (check_name, business_key) DO UPDATE
      SET kind = excluded.kind, expected = excluded.expected, observed = excluded.observed,
          last_run_id = excluded.last_run_id, last_seen_at = now(),
          status = CASE WHEN f.status = 'ignored' THEN 'ignored'
                        WHEN f.status = 'manual' AND f.repair IS NOT NULL AND f.kind = excluded.kind THEN 'manual'
                        ELSE excluded.status END,
          closed_at = CASE WHEN f.status = 'ignored' THEN f.closed_at ELSE NULL END
    RETURNING (xmax = 0) AS inserted, (SELECT p.status FROM previous p WHERE p.business_key = f.business_key) AS was`;
  let opened = 0;
  let reopened = 0;
  for (const r of result) {
    if (r.inserted) opened++;
    else if (r.was === 'repaired' || r.was === 'resolved') reopened++;
  }
  return { opened, reopened };
}

/**
 * A check's live findings (open, manual) that the given run did not observe, keyset-paged by id: what the run's
 * check re-examines before closing anything. Parameters: check, run id, the last id of the previous page, page
 * size. Returns: the findings. Locks: none.
 */
export async function unobservedFindings(
  sql: Queryable,
  check: string,
  runId: number,
  afterId: number,
  limit: number,
): Promise<StoredFinding[]> {
  return sql.unsafe<StoredFinding[]>(
    `SELECT ${COLUMNS} FROM reconciliation_finding
     WHERE check_name = $1 AND status IN ('open', 'manual') AND last_run_id < $2 AND finding_id > $3
     ORDER BY finding_id LIMIT $4`,
    [check, runId, afterId, limit],
  ) as unknown as Promise<StoredFinding[]>;
}

/**
 * Closes as resolved the given live findings of a check that its run re-examined and found healthy, unless the
 * run observed them after all. Parameters: check, run id, finding ids. Returns: how many were closed. Locks: those
 * rows.
 */
export async function resolveFindings(
  sql: Queryable,
  check: string,
  runId: number,
  ids: readonly number[],
): Promise<number> {
  if (ids.length === 0) return 0;
  const rows = await sql`
    UPDATE reconciliation_finding SET status = 'resolved', closed_at = now()
    WHERE finding_id = ANY (${[...ids]}::bigint[]) AND check_name = ${check} AND status IN ('open', 'manual')
      AND last_run_id < ${runId}
    RETURNING finding_id`;
  return rows.length;
}

export interface FindingFilter {
  check?: string;
  status?: FindingStatus;
  kind?: string;
  ids?: readonly number[];
  /** The business key, exactly. */
  key?: string;
  /** Keys starting with this (e.g. `demo-order:order-7@`: every version of an aggregate). */
  keyPrefix?: string;
  /** Findings a run opened, last observed, or last repaired (a repair pass's run id). */
  runId?: number;
}

/**
 * Findings matching the filter, in id order, keyset-paged. Parameters: filter, page size, the last id of the
 * previous page. Locks: none.
 */
export async function listFindings(
  sql: Queryable,
  f: FindingFilter,
  limit: number,
  afterId: number | null,
): Promise<StoredFinding[]> {
  return sql.unsafe<StoredFinding[]>(
    `SELECT ${COLUMNS} FROM reconciliation_finding
     WHERE ($1::text IS NULL OR check_name = $1) AND ($2::text IS NULL OR status = $2)
       AND ($3::text IS NULL OR kind = $3) AND ($4::bigint[] IS NULL OR finding_id = ANY($4::bigint[]))
       AND ($5::bigint IS NULL OR finding_id > $5) AND ($7::text IS NULL OR business_key = $7)
       AND ($8::text IS NULL OR starts_with(business_key, $8))
       AND ($9::bigint IS NULL OR first_run_id = $9 OR last_run_id = $9 OR repair->>'runId' = ($9::bigint)::text)
     ORDER BY finding_id LIMIT $6`,
    [
      f.check ?? null,
      f.status ?? null,
      f.kind ?? null,
      f.ids ? [...f.ids] : null,
      afterId,
      limit,
      f.key ?? null,
      f.keyPrefix ?? null,
      f.runId ?? null,
    ],
  ) as unknown as Promise<StoredFinding[]>;
}

/** Counts findings by check and status. Parameters: check (null = all). Locks: none. */
export async function countFindings(
  sql: Queryable,
  check: string | null,
): Promise<Array<{ check: string; status: FindingStatus; count: number }>> {
  return sql<Array<{ check: string; status: FindingStatus; count: number }>>`
    SELECT check_name AS "check", status, count(*)::int AS count FROM reconciliation_finding
    WHERE (${check}::text IS NULL OR check_name = ${check}::text)
    GROUP BY 1, 2 ORDER BY 1, 2`;
}

/** A finding, locked for the decision about it (inside a transaction). Parameters: id. Locks: the row. */
export async function lockFinding(sql: Queryable, id: number): Promise<StoredFinding | undefined> {
  const [row] = await sql.unsafe<StoredFinding[]>(
    `SELECT ${COLUMNS} FROM reconciliation_finding WHERE finding_id = $1 FOR UPDATE`,
    [id],
  );
  return row;
}

/**
 * Sets a finding's status and its repair record. Closing statuses (repaired, resolved, ignored) set closed_at.
 * Parameters: id, status, repair. Locks: the row.
 */
export async function setFindingStatus(
  sql: Queryable,
  id: number,
  status: FindingStatus,
  repair: Record<string, unknown> | null,
): Promise<void> {
  const closes = status === 'repaired' || status === 'resolved' || status === 'ignored';
  await sql`
    UPDATE reconciliation_finding
    SET status = ${status}, repair = coalesce(${repair === null ? null : sql.json(repair as never)}::jsonb, repair),
        closed_at = ${closes ? new Date() : null}
    WHERE finding_id = ${id}`;
}
