import type { Queryable } from '../db/connect.ts';

/** The (type, version) pairs of saga definitions a process loads, as the parallel arrays the statements unnest. */
export interface LoadedVersions {
  types: string[];
  versions: number[];
}

/**
 * Claims one saga for its timer's transition if it is still due at `at` and no other transaction holds it:
 * another runner's saga is skipped, never waited for, so a second runner adds throughput instead of queueing
 * behind the first one's locks; a saga that moved since it was listed (its timer fired elsewhere) is no longer due.
 * A saga in timer backoff (timer_failures > 0) is due at its due_at alone.
 * Parameters: saga id, the instant it must be due at. Returns: its version, or undefined (locked, or not due).
 * Locks: the saga row until commit (SKIP LOCKED).
 */
export async function claimDueSaga(sql: Queryable, sagaId: string, at: Date): Promise<number | undefined> {
  const [row] = await sql<{ version: string }[]>`
    SELECT version::text FROM saga_instance
    WHERE saga_id = ${sagaId}
      AND ((status IN ('running', 'resolving', 'compensating') AND due_at <= ${at})
           OR (status = 'running' AND deadline_at <= ${at} AND (timer_failures = 0 OR due_at <= ${at})))
    FOR UPDATE SKIP LOCKED`;
  return row ? Number(row.version) : undefined;
}

/**
 * Sagas of types this process runs whose definition version it does not load, overdue since before the cutoff
 * (no process that loads them fired their timers in the grace period): the timer runner freezes them as
 * definition_missing. Parameters: cutoff, the loaded versions, limit. Returns: (id, version), by id.
 * Locks: none (each is claimed with claimDueSaga before it is frozen).
 */
export async function overdueUnloadedSagas(
  sql: Queryable,
  cutoff: Date,
  loaded: LoadedVersions,
  limit: number,
): Promise<Array<{ sagaId: string; version: number }>> {
  const rows = await sql<{ saga_id: string; version: string }[]>`
    SELECT saga_id::text, version::text FROM saga_instance
    WHERE saga_type = ANY(${loaded.types}::text[])
      AND NOT EXISTS (SELECT 1 FROM unnest(${loaded.types}::text[], ${loaded.versions}::int[]) AS l(t, v)
                      WHERE l.t = saga_type AND l.v = definition_version)
      AND ((status IN ('running', 'resolving', 'compensating') AND due_at <= ${cutoff})
           OR (status = 'running' AND deadline_at <= ${cutoff}))
    ORDER BY saga_id LIMIT ${limit}`;
  return rows.map((r) => ({ sagaId: r.saga_id, version: Number(r.version) }));
}

/**
 * The timer failures of a saga since it last moved, locked for pushing its timer back.
 * Parameters: saga id, the version whose transition failed. Returns: the count, or undefined when the saga moved
 * on (another version, or no longer unfinished). Locks: the saga row until commit.
 */
export async function lockTimerFailures(sql: Queryable, sagaId: string, version: number): Promise<number | undefined> {
  const [row] = await sql<{ timer_failures: number }[]>`
    SELECT timer_failures FROM saga_instance
    WHERE saga_id = ${sagaId} AND version = ${version} AND status IN ('running', 'resolving', 'compensating')
    FOR UPDATE`;
  return row?.timer_failures;
}

/**
 * Pushes a saga's timer back after a transient failure of its transition, and counts the failure (the next
 * backoff grows with it). The version is not bumped: the timer stays the one armed at that version.
 * Parameters: saga id, version, the new due time. Returns: nothing. Locks: the saga row.
 */
export async function deferSagaTimer(sql: Queryable, sagaId: string, version: number, dueAt: Date): Promise<void> {
  await sql`
    UPDATE saga_instance SET due_at = ${dueAt}, timer_failures = timer_failures + 1
    WHERE saga_id = ${sagaId} AND version = ${version}`;
}

/**
 * Locks the sagas a batch of replies moves, in saga-id order, before any of them moves: two batches holding the
 * same sagas in different orders then queue instead of deadlocking. Parameters: saga ids (any order, repeats and
 * non-uuids ignored by the caller). Returns: nothing. Locks: those saga rows until commit.
 */
export async function lockSagasInOrder(sql: Queryable, sagaIds: readonly string[]): Promise<void> {
  if (sagaIds.length === 0) return;
  await sql`SELECT saga_id FROM saga_instance WHERE saga_id = ANY(${sagaIds as string[]}::uuid[]) ORDER BY saga_id FOR UPDATE`;
}
