import type { Queryable } from '../db/connect.ts';
import type { SagaStatus } from '../records/saga-state.ts';
import { readSaga } from './saga-instance.ts';

export interface SagaFilter {
  type?: string;
  status?: SagaStatus;
  /** Unfinished sagas whose last transition is older than this many ms. */
  stuckForMs?: number;
  /** Sagas whose deadline falls before this time. */
  deadlineBefore?: Date;
  version?: number;
}

export interface SagaListRow {
  seq: number;
  sagaId: string;
  type: string;
  version: number;
  businessKey: string;
  status: SagaStatus;
  createdAt: Date;
  updatedAt: Date;
}

/**
 * Sagas matching the filter, newest first, keyset-paged by seq. Parameters: filter, page size, the last seq of the
 * previous page. Returns: one row per saga (its state is read with readSaga). Locks: none.
 */
export async function listSagas(
  sql: Queryable,
  f: SagaFilter,
  limit: number,
  beforeSeq: number | null,
): Promise<SagaListRow[]> {
  const stuckSince = f.stuckForMs === undefined ? null : new Date(Date.now() - f.stuckForMs);
  const rows = await sql<
    Array<{
      seq: string;
      saga_id: string;
      saga_type: string;
      definition_version: number;
      business_key: string;
      status: SagaStatus;
      created_at: Date;
      updated_at: Date;
    }>
  >`
    SELECT seq::text, saga_id, saga_type, definition_version, business_key, status, created_at, updated_at
    FROM saga_instance
    WHERE (${f.type ?? null}::text IS NULL OR saga_type = ${f.type ?? null})
      AND (${f.status ?? null}::text IS NULL OR status = ${f.status ?? null})
      AND (${f.version ?? null}::int IS NULL OR definition_version = ${f.version ?? null})
      AND (${f.deadlineBefore ?? null}::timestamptz IS NULL OR deadline_at < ${f.deadlineBefore ?? null})
      AND (${stuckSince}::timestamptz IS NULL
           OR (status NOT IN ('completed', 'compensated', 'closed_manually') AND updated_at < ${stuckSince}))
      AND (${beforeSeq}::bigint IS NULL OR seq < ${beforeSeq})
    ORDER BY seq DESC
    LIMIT ${limit}`;
  return rows.map((r) => ({
    seq: Number(r.seq),
    sagaId: r.saga_id,
    type: r.saga_type,
    version: r.definition_version,
    businessKey: r.business_key,
    status: r.status,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  }));
}

export interface SagaCounts {
  byStatus: Record<SagaStatus, number>;
  /** The unfinished saga whose last transition is oldest (running, resolving, compensating or needs attention). */
  oldestStuck: { sagaId: string; type: string; status: SagaStatus; since: Date } | null;
  /** When the oldest saga still running (not frozen, not ended) started. */
  oldestRunningSince: Date | null;
}

/** Sagas by status, the oldest stuck and the oldest running. Parameters: none. Locks: none. */
export async function sagaCounts(sql: Queryable): Promise<SagaCounts> {
  const byStatus: Record<SagaStatus, number> = {
    running: 0,
    resolving: 0,
    compensating: 0,
    completed: 0,
    compensated: 0,
    needs_attention: 0,
    closed_manually: 0,
  };
  for (const r of await sql<Array<{ status: SagaStatus; n: string }>>`
    SELECT status, count(*)::text AS n FROM saga_instance GROUP BY status`) {
    byStatus[r.status] = Number(r.n);
  }
  const [stuck] = await sql<Array<{ saga_id: string; saga_type: string; status: SagaStatus; updated_at: Date }>>`
    SELECT saga_id, saga_type, status, updated_at FROM saga_instance
    WHERE status IN ('running', 'resolving', 'compensating', 'needs_attention')
    ORDER BY updated_at LIMIT 1`;
  const [running] = await sql<Array<{ created_at: Date | null }>>`
    SELECT min(created_at) AS created_at FROM saga_instance WHERE status IN ('running', 'resolving', 'compensating')`;
  return {
    byStatus,
    oldestStuck: stuck
      ? { sagaId: stuck.saga_id, type: stuck.saga_type, status: stuck.status, since: stuck.updated_at }
      : null,
    oldestRunningSince: running?.created_at ?? null,
  };
}

/** A saga by id with its timestamps, for the control plane. Parameters: id. Locks: none. */
export async function readSagaDetail(sql: Queryable, sagaId: string) {
  const state = await readSaga(sql, sagaId);
  if (!state) return undefined;
  const [t] = await sql<Array<{ seq: string; created_at: Date; updated_at: Date }>>`
    SELECT seq::text, created_at, updated_at FROM saga_instance WHERE saga_id = ${sagaId}`;
  return { ...state, seq: Number(t!.seq), createdAt: t!.created_at, updatedAt: t!.updated_at };
}
