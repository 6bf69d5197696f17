import type { Queryable, Sql } from '../db/connect.ts';
import { tryLockJob } from './job-lock.ts';

export type RunMode = 'check' | 'dry_run' | 'execute';
export type RunTrigger = 'scheduled' | 'on_demand';
export type RunStatus = 'running' | 'finished' | 'stopped' | 'failed' | 'skipped';

export interface ReconcileRunRow {
  runId: number;
  check: string;
  mode: RunMode;
  trigger: RunTrigger;
  actor: string;
  reason: string | null;
  status: RunStatus;
  counts: Record<string, unknown>;
  error: string | null;
  startedAt: Date;
  finishedAt: Date | null;
}

const COLUMNS = `run_id::int AS "runId", check_name AS "check", mode, trigger, actor, reason, status, counts, error,
  started_at AS "startedAt", finished_at AS "finishedAt"`;

/**
 * Records the start of a run (or, with status skipped, one that could not start).
 * Parameters: check, mode, trigger, actor, reason, status. Returns: the run id. Locks: none.
 */
export async function insertRun(
  sql: Queryable,
  r: { check: string; mode: RunMode; trigger: RunTrigger; actor: string; reason: string | null; status?: RunStatus },
): Promise<number> {
  const status = r.status ?? 'running';
  const [row] = await sql<{ run_id: string }[]>`
    INSERT INTO reconciliation_run (check_name, mode, trigger, actor, reason, status, finished_at)
    VALUES (${r.check}, ${r.mode}, ${r.trigger}, ${r.actor}, ${r.reason}, ${status},
            ${status === 'running' ? null : new Date()})
    RETURNING run_id`;
  return Number(row!.run_id);
}

/** Ends a run with its counts. Parameters: run id, status, counts, error. Locks: the run row. */
export async function finishRun(
  sql: Queryable,
  runId: number,
  status: Exclude<RunStatus, 'running'>,
  counts: object,
  error: string | null = null,
): Promise<void> {
  await sql`
    UPDATE reconciliation_run SET status = ${status}, counts = ${sql.json(counts as never)}, error = ${error},
           finished_at = now()
    WHERE run_id = ${runId}`;
}

/**
 * Ends the runs of a check still marked running as failed (abandoned): called by a run holding the check's lock
 * (tryLockCheck), so no other process is running it; such a row belongs to a process that died or lost the
 * database before it could end its run. Parameters: check. Returns: how many. Locks: those run rows.
 */
export async function abandonRuns(sql: Queryable, check: string): Promise<number> {
  const rows = await sql`
    UPDATE reconciliation_run SET status = 'failed', finished_at = now(),
           error = 'abandoned: its process ended or lost the database before it finished the run'
    WHERE check_name = ${check} AND status = 'running'`;
  return rows.count;
}

/** A run by id. Locks: none. */
export async function readRun(sql: Queryable, runId: number): Promise<ReconcileRunRow | undefined> {
  const [row] = await sql.unsafe<ReconcileRunRow[]>(`SELECT ${COLUMNS} FROM reconciliation_run WHERE run_id = $1`, [
    runId,
  ]);
  return row;
}

export interface RunFilter {
  check?: string;
  mode?: RunMode;
  status?: RunStatus;
}

/** Runs, newest first, keyset-paged by run id. Parameters: filter, page size, last id seen. Locks: none. */
export async function listRuns(
  sql: Queryable,
  f: RunFilter,
  limit: number,
  beforeId: number | null,
): Promise<ReconcileRunRow[]> {
  return sql.unsafe<ReconcileRunRow[]>(
    `SELECT ${COLUMNS} FROM reconciliation_run
     WHERE ($1::text IS NULL OR check_name = $1) AND ($2::text IS NULL OR mode = $2)
       AND ($3::text IS NULL OR status = $3) AND ($4::bigint IS NULL OR run_id < $4)
     ORDER BY run_id DESC LIMIT $5`,
    [f.check ?? null, f.mode ?? null, f.status ?? null, beforeId, limit],
  ) as unknown as Promise<ReconcileRunRow[]>;
}

/**
 * One run of a check at a time across processes: a session advisory lock on a connection reserved for the run,
 * keyed by the check's name. Parameters: check. Returns: a release function, or null when another run holds it.
 * Locks: the advisory lock (postbox.reconcile, check) until released or the connection ends (a crashed process
 * frees it).
 */
export async function tryLockCheck(sql: Sql, check: string): Promise<(() => Promise<void>) | null> {
  return tryLockJob(sql, 'postbox.reconcile', check);
}
