import type { SagaDefinition } from './definition.ts';
import {
  type AttentionReason,
  type HistoryEntry,
  type SagaState,
  type StepStatus,
  TERMINAL,
} from '../records/saga-state.ts';
import { type Outgoing, REPLY, type SagaEvent, type Transition } from './transition.ts';

/**
 * The saga state machine, pure: a state and an event in, the next state, at most one command to send and the
 * history lines out. The orchestrator (orchestrator.ts) runs it inside one transaction per event. Rules:
 * a reply counts for the command out now (same step, direction and attempt), or as a late fact about that step
 * (lateFact), anything else is stale; a
 * command unanswered is never taken for failed — the saga asks (query) before it acts; compensation undoes the
 * succeeded steps one at a time, last first, each with its own attempts; after the pivot nothing is compensated.
 * The building blocks below are exported for the operators' actions (operator-actions.ts), which move a saga by
 * the same rules; the package's public entry (saga.ts) exports only startState's callers.
 */
export function startState<D>(
  definition: SagaDefinition<D>,
  init: { id: string; businessKey: string; data: D; now: number },
): Transition<D> {
  const first = definition.steps[0]!;
  const state: SagaState<D> = {
    id: init.id,
    type: definition.type,
    definitionVersion: definition.version,
    businessKey: init.businessKey,
    status: 'running',
    step: 0,
    direction: 'forward',
    attempt: 1,
    version: 1,
    data: init.data,
    steps: definition.steps.map((_, i): StepStatus => (i === 0 ? 'running' : 'pending')),
    sends: definition.steps.map(() => 0),
    pivotPassed: false,
    attentionReason: null,
    dueAt: init.now + first.timeoutMs,
    deadlineAt: definition.deadlineMs === null ? null : init.now + definition.deadlineMs,
  };
  return {
    verdict: 'applied',
    state,
    send: outgoing(definition, state),
    history: [{ from: null, to: 'running', step: first.name, direction: 'forward', cause: 'started' }],
  };
}

export function nextState<D>(
  definition: SagaDefinition<D>,
  state: SagaState<D>,
  event: SagaEvent,
  now: number,
): Transition<D> {
  if (TERMINAL.has(state.status) || state.status === 'needs_attention') return stale(state);
  if (event.kind === 'deadline') return onDeadline(definition, state, now);
  if (event.kind === 'timeout') {
    if (event.version !== state.version || state.dueAt === null || now < state.dueAt) return stale(state);
    return onUnanswered(definition, state, now, 'timed out');
  }
  const step = definition.steps[state.step]!;
  if (event.step !== step.name) return stale(state);
  if (event.direction !== state.direction || event.attempt !== state.attempt) {
    return lateFact(definition, state, event, now);
  }
  if (event.type === REPLY.unknown) return onUnanswered(definition, state, now, 'participant could not tell');
  if (state.direction === 'forward') {
    if (step.success.includes(event.type)) return succeed(definition, state, event.data, now, `reply ${event.type}`);
    if (step.failure.includes(event.type)) return refuse(definition, state, 'failed', now, `refused: ${event.type}`);
  } else if (state.direction === 'query') {
    if (event.type === REPLY.applied) return succeed(definition, state, event.data, now, 'query: applied');
    if (event.type === REPLY.notApplied) return refuse(definition, state, 'not_applied', now, 'query: not applied');
  } else {
    if (event.type === REPLY.compensated) {
      const next = advance(state, { steps: withStep(state.steps, state.step, 'compensated') });
      return compensateFrom(definition, next, state.step - 1, now, `compensated ${step.name}`, state);
    }
    if (event.type === REPLY.compensationRefused) {
      return attention(definition, state, 'compensation_refused', `refused to undo ${step.name}`);
    }
  }
  return stale(state); // a reply type this command does not expect: recorded by the caller, never applied
}

/**
 * A reply to an earlier command of the step out now: stale, unless it states a fact that cannot change — the
 * participant fences what it did not apply, so "applied", "refused", "not applied" and "compensated" stay true.
 * While the saga asks about a step, the step's own late reply or the answer to an earlier question settles it;
 * while it compensates, an earlier attempt's "compensated" does. (Ignoring them would make a slow participant's
 * sagas ask until their attempts ran out, each question adding to the queue that delays the answers.)
 */
function lateFact<D>(
  definition: SagaDefinition<D>,
  state: SagaState<D>,
  event: Extract<SagaEvent, { kind: 'reply' }>,
  now: number,
): Transition<D> {
  const step = definition.steps[state.step]!;
  const late = `late ${event.direction} #${event.attempt}`;
  if (state.direction === 'query' && event.direction === 'forward' && event.attempt === 1) {
    if (step.success.includes(event.type)) return succeed(definition, state, event.data, now, `${late}: ${event.type}`);
    if (step.failure.includes(event.type)) return refuse(definition, state, 'failed', now, `${late}: ${event.type}`);
  }
  if (state.direction === 'query' && event.direction === 'query' && event.attempt < state.attempt) {
    if (event.type === REPLY.applied) return succeed(definition, state, event.data, now, `${late}: applied`);
    if (event.type === REPLY.notApplied) return refuse(definition, state, 'not_applied', now, `${late}: not applied`);
  }
  if (
    state.direction === 'compensate' &&
    event.direction === 'compensate' &&
    event.attempt < state.attempt &&
    event.type === REPLY.compensated
  ) {
    const next = advance(state, { steps: withStep(state.steps, state.step, 'compensated') });
    return compensateFrom(definition, next, state.step - 1, now, `${late}: compensated ${step.name}`, state);
  }
  return stale(state);
}

/** A step applied: fold its result in, then the next step, or completed. */
export function succeed<D>(
  definition: SagaDefinition<D>,
  state: SagaState<D>,
  reply: unknown,
  now: number,
  cause: string,
): Transition<D> {
  const step = definition.steps[state.step]!;
  const base = advance(state, {
    steps: withStep(state.steps, state.step, 'succeeded'),
    data: step.onSuccess(state.data, reply),
    pivotPassed: state.pivotPassed || step.pivot,
  });
  const nextIndex = state.step + 1;
  if (nextIndex >= definition.steps.length) {
    return applied(
      state,
      { ...base, status: 'completed', dueAt: null },
      null,
      definition.steps[state.step]!.name,
      cause,
    );
  }
  if (step.pivot && state.deadlineAt !== null && now >= state.deadlineAt) {
    // The pivot applied past the deadline (onDeadline asked it, or its reply beat the deadline's timer): the saga
    // is forward-only now, and a deadline after the pivot is the operator's call.
    return attention(definition, base, 'deadline_after_pivot', `${cause}, after the deadline`, state);
  }
  const next: SagaState<D> = {
    ...base,
    status: 'running',
    step: nextIndex,
    direction: 'forward',
    attempt: 1,
    steps: withStep(base.steps, nextIndex, 'running'),
    dueAt: now + definition.steps[nextIndex]!.timeoutMs,
  };
  return applied(state, next, outgoing(definition, next), step.name, cause);
}

/** A step not applied (refused, or not applied when asked): undo what went before, unless past the pivot. */
export function refuse<D>(
  definition: SagaDefinition<D>,
  state: SagaState<D>,
  status: StepStatus,
  now: number,
  cause: string,
): Transition<D> {
  const next = advance(state, { steps: withStep(state.steps, state.step, status) });
  if (state.pivotPassed) return attention(definition, next, 'failed_after_pivot', cause, state);
  return compensateFrom(definition, next, state.step - 1, now, cause, state);
}

/** The command out got no answer in time (or an unknown one): ask, ask again, or give up to an operator. */
export function onUnanswered<D>(
  definition: SagaDefinition<D>,
  state: SagaState<D>,
  now: number,
  cause: string,
): Transition<D> {
  const step = definition.steps[state.step]!;
  if (state.direction === 'forward') {
    const next = advance(state, { status: 'resolving', direction: 'query', attempt: 1, dueAt: now + step.timeoutMs });
    return applied(state, next, outgoing(definition, next), step.name, `${cause}: asking`);
  }
  if (state.attempt < step.maxAttempts) {
    const next = advance(state, { attempt: state.attempt + 1, dueAt: now + step.timeoutMs });
    return applied(state, next, outgoing(definition, next), step.name, `${cause}: sent again (${state.attempt + 1})`);
  }
  const reason: AttentionReason = state.direction === 'query' ? 'query_unanswered' : 'budget_exhausted';
  return attention(definition, state, reason, `${cause} after ${state.attempt} attempt(s)`);
}

/**
 * Past the deadline: before the pivot, compensate — the step in flight too (its compensation refuses or fences
 * a command that never ran), then the succeeded ones; with the pivot in flight, ask it first; after the pivot, an
 * operator decides.
 */
function onDeadline<D>(definition: SagaDefinition<D>, state: SagaState<D>, now: number): Transition<D> {
  if (state.deadlineAt === null || now < state.deadlineAt || state.status === 'compensating') return stale(state);
  if (state.pivotPassed) return attention(definition, state, 'deadline_after_pivot', 'deadline passed after the pivot');
  const inFlight = definition.steps[state.step]!;
  if (inFlight.pivot) {
    // The pivot's command may still apply, and nothing undoes or fences it (it has no compensation): compensating
    // the steps before it now could refund a payment for goods that then ship. Ask first — the participant fences
    // a command it did not apply — and let the answer decide: not applied → compensate (refuse); applied →
    // forward-only (succeed: needs attention, or completed when the pivot was the last step).
    if (state.direction === 'query') return stale(state);
    return onUnanswered(definition, state, now, 'deadline passed with the pivot in flight');
  }
  const steps = inFlight.compensate ? withStep(state.steps, state.step, 'succeeded') : state.steps;
  return compensateFrom(definition, advance(state, { steps }), state.step, now, 'deadline passed', state);
}

/** Compensates the last succeeded step at or below `from` that has a compensation; none left: compensated. */
export function compensateFrom<D>(
  definition: SagaDefinition<D>,
  state: SagaState<D>,
  from: number,
  now: number,
  cause: string,
  previous: SagaState<D>,
): Transition<D> {
  for (let k = from; k >= 0; k--) {
    const step = definition.steps[k]!;
    if (state.steps[k] !== 'succeeded' || !step.compensate) continue;
    const next: SagaState<D> = {
      ...state,
      status: 'compensating',
      step: k,
      direction: 'compensate',
      attempt: 1,
      dueAt: now + step.timeoutMs,
    };
    return applied(previous, next, outgoing(definition, next), step.name, cause);
  }
  const done: SagaState<D> = { ...state, status: 'compensated', dueAt: null };
  return applied(previous, done, null, definition.steps[previous.step]!.name, cause);
}

/**
 * Freezes the saga. The history line names the step it stopped at (`entry()` leaves the step to its caller): a
 * line with `step: null` would hide the step from the transitions an operator most needs to read.
 */
export function attention<D>(
  definition: SagaDefinition<D>,
  state: SagaState<D>,
  reason: AttentionReason,
  cause: string,
  previous: SagaState<D> = state,
): Transition<D> {
  const next: SagaState<D> = {
    ...advance(state, {}),
    version: previous.version + 1,
    status: 'needs_attention',
    attentionReason: reason,
    dueAt: null,
  };
  const step = definition.steps[previous.step]!.name;
  return {
    verdict: 'applied',
    state: next,
    send: null,
    history: [{ ...entry(previous, next, `${reason}: ${cause}`), step }],
  };
}

/** The command of the current (step, direction) with the saga's data. */
export function outgoing<D>(definition: SagaDefinition<D>, state: SagaState<D>): Outgoing {
  const step = definition.steps[state.step]!;
  const make =
    state.direction === 'forward' ? step.command : state.direction === 'query' ? step.query : step.compensate!;
  return {
    step: step.name,
    direction: state.direction,
    attempt: state.attempt,
    topic: step.topic,
    command: make(state.data),
  };
}

/** A copy with the changes and the version bumped once (relative to the state it came from). */
export function advance<D>(state: SagaState<D>, changes: Partial<SagaState<D>>): SagaState<D> {
  return { ...state, ...changes, version: state.version + 1 };
}

export function applied<D>(
  previous: SagaState<D>,
  next: SagaState<D>,
  send: Outgoing | null,
  step: string,
  cause: string,
): Transition<D> {
  const state = { ...next, version: previous.version + 1 };
  return { verdict: 'applied', state, send, history: [{ ...entry(previous, state, cause), step }] };
}

function entry<D>(previous: SagaState<D>, next: SagaState<D>, cause: string): HistoryEntry {
  return { from: previous.status, to: next.status, step: null, direction: next.direction, cause };
}

export function stale<D>(state: SagaState<D>): Transition<D> {
  return { verdict: 'stale', state, send: null, history: [] };
}

export function withStep(steps: StepStatus[], index: number, status: StepStatus): StepStatus[] {
  const copy = [...steps];
  copy[index] = status;
  return copy;
}
