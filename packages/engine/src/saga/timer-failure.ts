import type { Queryable, Sql } from '../db/connect.ts';
import { sqlExecutor } from '../db/sql-executor.ts';
import { definitionSteps } from '../queries/saga-definition.ts';
import { insertSagaHistory } from '../queries/saga-history.ts';
import { lockSaga, saveSaga } from '../queries/saga-instance.ts';
import { deferSagaTimer, lockTimerFailures } from '../queries/saga-timer.ts';
import { type BackoffOptions, backoffDelayMs, defaultBackoff } from '../retry/backoff.ts';
import { classify } from '../retry/classify.ts';
import { EnvelopeTooLargeError, EnvelopeValidationError } from '../errors.ts';
import { SagaTransitionError } from './errors.ts';
import type { AttentionReason, SagaState } from '../records/saga-state.ts';

/** What became of a saga whose timer transition failed. */
export type TimerFailureOutcome =
  | { outcome: 'frozen'; reason: AttentionReason; detail: string }
  | { outcome: 'deferred'; dueAt: Date; detail: string }
  /** The saga moved on (another version, or ended) before the failure was recorded: nothing to do. */
  | { outcome: 'moved'; detail: string };

const LIVE = new Set(['running', 'resolving', 'compensating']);

/**
 * Freezes an unfinished saga for an operator, in the caller's transaction: needs_attention with `reason`, no
 * timer, the version bumped (a compare-and-set from `expectedVersion`) and one history line naming the step (from
 * the stored definition, so this works for a version the process does not load). Returns false, changing
 * nothing, when the saga moved past `expectedVersion` or is no longer unfinished.
 * Locks: the saga row until commit.
 */
export async function freezeSaga(
  tx: Queryable,
  sagaId: string,
  expectedVersion: number,
  reason: AttentionReason,
  cause: string,
): Promise<boolean> {
  const state = await lockSaga(tx, sagaId);
  if (!state || state.version !== expectedVersion || !LIVE.has(state.status)) return false;
  const next: SagaState = {
    ...state,
    status: 'needs_attention',
    attentionReason: reason,
    dueAt: null,
    version: state.version + 1,
  };
  if (!(await saveSaga(tx, next, state.version))) return false;
  const steps = await definitionSteps(tx, state.type, state.definitionVersion);
  await insertSagaHistory(sqlExecutor(tx), sagaId, next.version, [
    {
      from: state.status,
      to: 'needs_attention',
      step: steps?.[state.step] ?? null,
      direction: state.direction,
      cause: `${reason}: ${cause}`,
    },
  ]);
  return true;
}

/**
 * Isolates a saga whose timer transition threw (the transaction that tried it rolled back), in a transaction of
 * its own, so that the loop firing timers goes on with the next saga:
 * - a failure of the saga's own (a definition function that throws, a command over the envelope limit) freezes
 *   it as needs_attention (transition_failed), the error in its history line: retrying would fail the same way;
 * - any other failure — transient, unknown, or permanent but not the saga's (a missing grant, a dropped table: a
 *   deploy's fault that every saga would meet) — pushes its due_at back by the project's full-jitter backoff,
 *   growing with the failures counted since it last moved, so that fixing the cause lets every saga go on (an
 *   unknown commit is safe: the version fences a timer that did fire).
 * Throws only when these writes fail too (the database is away: the caller's loop backs off as a whole).
 */
export async function isolateTimerFailure(
  sql: Sql,
  target: { sagaId: string; version: number },
  cause: unknown,
  now: number,
  backoff: BackoffOptions = defaultBackoff,
): Promise<TimerFailureOutcome> {
  const c = classify(cause);
  const detail = `${c.code}: ${(cause as Error)?.message ?? String(cause)}`;
  return (await sql.begin(async (tx): Promise<TimerFailureOutcome> => {
    if (c.kind === 'permanent' && isTheSagasOwn(cause)) {
      const frozen = await freezeSaga(tx, target.sagaId, target.version, 'transition_failed', detail);
      return frozen
        ? { outcome: 'frozen', reason: 'transition_failed', detail }
        : { outcome: 'moved', detail: `saga ${target.sagaId} moved past v${target.version}` };
    }
    const failures = await lockTimerFailures(tx, target.sagaId, target.version);
    if (failures === undefined)
      return { outcome: 'moved', detail: `saga ${target.sagaId} moved past v${target.version}` };
    const dueAt = new Date(now + backoffDelayMs(failures, backoff));
    await deferSagaTimer(tx, target.sagaId, target.version, dueAt);
    return { outcome: 'deferred', dueAt, detail };
  })) as TimerFailureOutcome;
}

/** Whether a failure is the saga's own: its definition threw, or what it asked to send is no valid envelope. */
function isTheSagasOwn(cause: unknown): boolean {
  return (
    cause instanceof SagaTransitionError ||
    cause instanceof EnvelopeTooLargeError ||
    cause instanceof EnvelopeValidationError
  );
}
