import type { Queryable } from '../db/connect.ts';
import type { SagaStatus, StepStatus } from '../records/saga-state.ts';

export interface SagaTimerFact {
  seq: number;
  saga_id: string;
  saga_type: string;
  definition_version: number;
  status: SagaStatus;
  version: number;
  due_at: Date | null;
  deadline_at: Date | null;
  updated_at: Date;
  attention_reason: string | null;
}

const TIMER_COLUMNS = sqlColumns(`seq::text, saga_id::text, saga_type, definition_version, status, version::text,
  due_at, deadline_at, updated_at, attention_reason`);

/**
 * Unfinished sagas whose timer should have fired before the cutoff and did not: a command's due time (running,
 * resolving, compensating) or the deadline of a running saga — what SagaTimerRunner.fireDue looks for, aged past
 * the grace period. Keyset-paged by seq. Parameters: cutoff, last seq seen, limit. Locks: none.
 */
export async function unfiredSagaTimers(
  sql: Queryable,
  cutoff: Date,
  afterSeq: number,
  limit: number,
): Promise<SagaTimerFact[]> {
  return timerFacts(
    await sql.unsafe(
      `SELECT ${TIMER_COLUMNS} FROM saga_instance
       WHERE seq > $2 AND ((status IN ('running', 'resolving', 'compensating') AND due_at <= $1)
                           OR (status = 'running' AND deadline_at <= $1))
       ORDER BY seq LIMIT $3`,
      [cutoff, afterSeq, limit],
    ),
  );
}

/**
 * Sagas an operator should have seen by now: frozen (needs_attention) since before the cutoff, or not ended though
 * their deadline passed before it. Keyset-paged by seq. Parameters: cutoff, last seq seen, limit. Locks: none.
 */
export async function overdueSagas(
  sql: Queryable,
  cutoff: Date,
  afterSeq: number,
  limit: number,
): Promise<SagaTimerFact[]> {
  return timerFacts(
    await sql.unsafe(
      `SELECT ${TIMER_COLUMNS} FROM saga_instance
       WHERE seq > $2 AND ((status = 'needs_attention' AND updated_at <= $1)
                           OR (status IN ('running', 'resolving', 'compensating', 'needs_attention') AND deadline_at <= $1))
       ORDER BY seq LIMIT $3`,
      [cutoff, afterSeq, limit],
    ),
  );
}

/** One saga's timer facts, or undefined. Parameters: saga id. Locks: none. */
export async function sagaTimerFact(sql: Queryable, sagaId: string): Promise<SagaTimerFact | undefined> {
  const [row] = timerFacts(await sql.unsafe(`SELECT ${TIMER_COLUMNS} FROM saga_instance WHERE saga_id = $1`, [sagaId]));
  return row;
}

/** A saga's steps as its row and its participants' records (saga_participation) tell them. */
export interface SagaStepsFact {
  seq: number;
  saga_id: string;
  saga_type: string;
  definition_version: number;
  status: SagaStatus;
  pivot_passed: boolean;
  direction: string;
  updated_at: Date;
  /** Step statuses as the saga holds them, and the step names of its definition version. */
  steps: StepStatus[];
  names: string[];
  /** step name → the participant's record (applied, compensated, fenced); absent: never seen. */
  records: Record<string, string>;
}

/**
 * Sagas of the given types last moved before the cutoff, with their step names (saga_definition) and the records
 * participants in this database keep of each step (keyed `<saga id>:<step>`). Keyset-paged by seq.
 * Parameters: types, cutoff, last seq seen, limit. Locks: none.
 */
export async function sagaSteps(
  sql: Queryable,
  types: readonly string[],
  cutoff: Date,
  afterSeq: number,
  limit: number,
): Promise<SagaStepsFact[]> {
  const rows = await sql.unsafe<Array<Record<string, unknown>>>(
    `SELECT s.seq::text, s.saga_id::text, s.saga_type, s.definition_version, s.status, s.pivot_passed, s.direction,
            s.updated_at, s.steps, d.steps AS names,
            coalesce((SELECT jsonb_object_agg(split_part(p.step_key, ':', 2), p.status) FROM saga_participation p
                      WHERE p.step_key IN (SELECT s.saga_id::text || ':' || n FROM unnest(d.steps) AS n)), '{}') AS records
     FROM saga_instance s
     JOIN saga_definition d ON d.saga_type = s.saga_type AND d.version = s.definition_version
     WHERE s.saga_type = ANY ($1::text[]) AND s.updated_at <= $2 AND s.seq > $3
     ORDER BY s.seq LIMIT $4`,
    [[...types], cutoff, afterSeq, limit],
  );
  return rows.map((r) => ({ ...(r as unknown as SagaStepsFact), seq: Number(r.seq) }));
}

/** One saga's steps fact (any type), or undefined. Parameters: saga id. Locks: none. */
export async function sagaStepsOf(sql: Queryable, sagaId: string): Promise<SagaStepsFact | undefined> {
  const [row] = await sql.unsafe<Array<Record<string, unknown>>>(
    `SELECT s.seq::text, s.saga_id::text, s.saga_type, s.definition_version, s.status, s.pivot_passed, s.direction,
            s.updated_at, s.steps, d.steps AS names,
            coalesce((SELECT jsonb_object_agg(split_part(p.step_key, ':', 2), p.status) FROM saga_participation p
                      WHERE p.step_key IN (SELECT s.saga_id::text || ':' || n FROM unnest(d.steps) AS n)), '{}') AS records
     FROM saga_instance s
     JOIN saga_definition d ON d.saga_type = s.saga_type AND d.version = s.definition_version
     WHERE s.saga_id = $1`,
    [sagaId],
  );
  return row ? { ...(row as unknown as SagaStepsFact), seq: Number(row.seq) } : undefined;
}

/** Where a saga stands and when it last moved. */
export interface SagaMove {
  saga_id: string;
  saga_type: string;
  status: SagaStatus;
  updated_at: Date;
}

/**
 * The given sagas' status and last move, for re-examining findings. Parameters: saga ids. Returns: the sagas that
 * exist. Locks: none.
 */
export async function sagaMoves(sql: Queryable, sagaIds: readonly string[]): Promise<SagaMove[]> {
  if (sagaIds.length === 0) return [];
  return sql<SagaMove[]>`
    SELECT saga_id::text, saga_type, status, updated_at FROM saga_instance
    WHERE saga_id = ANY (${[...sagaIds]}::uuid[])`;
}

function timerFacts(rows: ReadonlyArray<Record<string, unknown>>): SagaTimerFact[] {
  return rows.map((r) => ({ ...(r as unknown as SagaTimerFact), seq: Number(r.seq), version: Number(r.version) }));
}

function sqlColumns(text: string): string {
  return text.replace(/\s+/g, ' ');
}
