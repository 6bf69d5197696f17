import type { Queryable } from '../db/connect.ts';
import type { SqlExecutor } from '../ports/sql-executor.ts';
import type { LoadedVersions } from './saga-timer.ts';
import type { AttentionReason, Direction, SagaState, SagaStatus, StepStatus } from '../records/saga-state.ts';

interface SagaRow {
  saga_id: string;
  saga_type: string;
  definition_version: number;
  business_key: string;
  status: SagaStatus;
  step: number;
  direction: Direction;
  attempt: number;
  version: string;
  data: unknown;
  steps: StepStatus[];
  sends: number[];
  pivot_passed: boolean;
  attention_reason: AttentionReason | null;
  due_at: Date | null;
  deadline_at: Date | null;
}

const SELECT = `saga_id, saga_type, definition_version, business_key, status, step, direction, attempt,
  version::text, data, steps, sends, pivot_passed, attention_reason, due_at, deadline_at`;

/**
 * Inserts a new saga unless one of its type already has the business key.
 * Parameters: the initial state. Returns: true when inserted. Locks: the new row (the unique index serialises
 * two starts of one key: the second waits for the first's commit, then finds it).
 */
export async function insertSaga(tx: SqlExecutor, s: SagaState): Promise<boolean> {
  // Through the caller's client (sagas start in the business transaction): every parameter cast in the text.
  const rows = await tx.query(
    `INSERT INTO saga_instance (saga_id, saga_type, definition_version, business_key, status, step, direction,
                                attempt, version, data, steps, sends, pivot_passed, attention_reason, due_at, deadline_at)
     VALUES ($1::uuid, $2::text, $3::int4, $4::text, $5::text, $6::int4, $7::text, $8::int4, $9::text::int8,
             $10::text::jsonb, $11::text[], $12::int4[], $13::bool, $14::text, $15::text::timestamptz,
             $16::text::timestamptz)
     ON CONFLICT (saga_type, business_key) DO NOTHING
     RETURNING saga_id::text AS saga_id`,
    [
      s.id,
      s.type,
      s.definitionVersion,
      s.businessKey,
      s.status,
      s.step,
      s.direction,
      s.attempt,
      String(s.version),
      JSON.stringify(s.data ?? null),
      s.steps,
      s.sends,
      s.pivotPassed,
      s.attentionReason,
      toIso(s.dueAt),
      toIso(s.deadlineAt),
    ],
  );
  return rows.length === 1;
}

/** The id of the saga of a type with a business key, through the caller's client. Locks: none. */
export async function sagaIdByBusinessKey(
  tx: SqlExecutor,
  type: string,
  businessKey: string,
): Promise<string | undefined> {
  const [row] = await tx.query<{ saga_id: string }>(
    'SELECT saga_id::text AS saga_id FROM saga_instance WHERE saga_type = $1::text AND business_key = $2::text',
    [type, businessKey],
  );
  return row?.saga_id;
}

/** The saga of a type with a business key. Parameters: type, key. Returns: its state or undefined. Locks: none. */
export async function sagaByBusinessKey(
  sql: Queryable,
  type: string,
  businessKey: string,
): Promise<SagaState | undefined> {
  const [row] = await sql.unsafe<SagaRow[]>(
    `SELECT ${SELECT} FROM saga_instance WHERE saga_type = $1 AND business_key = $2`,
    [type, businessKey],
  );
  return row ? toState(row) : undefined;
}

/** A saga by id. Parameters: id. Returns: its state or undefined. Locks: none. */
export async function readSaga(sql: Queryable, sagaId: string): Promise<SagaState | undefined> {
  const [row] = await sql.unsafe<SagaRow[]>(`SELECT ${SELECT} FROM saga_instance WHERE saga_id = $1`, [sagaId]);
  return row ? toState(row) : undefined;
}

/**
 * A saga by id, locked for its transition. Parameters: id. Returns: its state or undefined.
 * Locks: the saga row until commit (two replies of one saga at once: the second waits, then sees the first's
 * transition and is judged against it).
 */
export async function lockSaga(sql: Queryable, sagaId: string): Promise<SagaState | undefined> {
  const [row] = await sql.unsafe<SagaRow[]>(`SELECT ${SELECT} FROM saga_instance WHERE saga_id = $1 FOR UPDATE`, [
    sagaId,
  ]);
  return row ? toState(row) : undefined;
}

/**
 * Writes a transition: compare-and-set by the version it was computed from.
 * Parameters: the next state, the version it follows. Returns: true when written (false: someone else moved the
 * saga first). Locks: the saga row (held already when the caller used lockSaga).
 */
export async function saveSaga(sql: Queryable, s: SagaState, previousVersion: number): Promise<boolean> {
  const rows = await sql`
    UPDATE saga_instance
    SET status = ${s.status}, step = ${s.step}, direction = ${s.direction}, attempt = ${s.attempt},
        version = ${s.version}, data = ${sql.json(s.data as never)}, steps = ${s.steps}::text[], sends = ${s.sends}::int[],
        pivot_passed = ${s.pivotPassed}, attention_reason = ${s.attentionReason}, due_at = ${toDate(s.dueAt)},
        deadline_at = ${toDate(s.deadlineAt)}, timer_failures = 0, updated_at = now()
    WHERE saga_id = ${s.id} AND version = ${previousVersion}
    RETURNING saga_id`;
  return rows.length === 1;
}

/**
 * Unfinished sagas whose command is overdue or whose deadline passed, oldest first; with `loaded`, only those of
 * definition versions the caller loads (others are for a process that loads them, or for definition_missing).
 * A saga in timer backoff (timer_failures > 0) is due at its due_at alone.
 * Parameters: now, limit, the loaded versions. Returns: (id, version). Locks: none (each is claimed for its own
 * transition, claimDueSaga).
 */
export async function dueSagas(
  sql: Queryable,
  now: Date,
  limit: number,
  loaded?: LoadedVersions,
): Promise<Array<{ sagaId: string; version: number }>> {
  const only = loaded
    ? sql`AND EXISTS (SELECT 1 FROM unnest(${loaded.types}::text[], ${loaded.versions}::int[]) AS l(t, v)
                      WHERE l.t = saga_type AND l.v = definition_version)`
    : sql``;
  const rows = await sql<{ saga_id: string; version: string }[]>`
    SELECT saga_id, version::text FROM (
      SELECT saga_id, version, due_at AS at FROM saga_instance
      WHERE status IN ('running', 'resolving', 'compensating') AND due_at <= ${now} ${only}
      UNION
      -- A deadline moves a running saga only: one compensating already ignores it, and one resolving decides when
      -- its question is answered (or times out), so neither comes back at every look.
      SELECT saga_id, version, deadline_at FROM saga_instance
      WHERE status = 'running' AND deadline_at <= ${now} AND (timer_failures = 0 OR due_at <= ${now}) ${only}
    ) due ORDER BY at LIMIT ${limit}`;
  return rows.map((r) => ({ sagaId: r.saga_id, version: Number(r.version) }));
}

function toState(r: SagaRow): SagaState {
  return {
    id: r.saga_id,
    type: r.saga_type,
    definitionVersion: r.definition_version,
    businessKey: r.business_key,
    status: r.status,
    step: r.step,
    direction: r.direction,
    attempt: r.attempt,
    version: Number(r.version),
    data: r.data,
    steps: r.steps,
    sends: r.sends,
    pivotPassed: r.pivot_passed,
    attentionReason: r.attention_reason,
    dueAt: r.due_at ? r.due_at.getTime() : null,
    deadlineAt: r.deadline_at ? r.deadline_at.getTime() : null,
  };
}

function toIso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

function toDate(ms: number | null): Date | null {
  return ms === null ? null : new Date(ms);
}
