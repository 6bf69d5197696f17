import type { SagaDefinition } from './definition.ts';
import { advance, applied, compensateFrom, onUnanswered, outgoing, refuse, succeed, withStep } from './machine.ts';
import { type SagaState, TERMINAL } from '../records/saga-state.ts';
import type { Transition } from './transition.ts';

/**
 * What an operator can do to a saga. Each moves it by the machine's own rules (machine.ts), so an operator can
 * unfreeze a saga but not make it do what the saga itself would never do (compensate after the pivot):
 * - retry: the command out now once more (one more attempt; a forward command is not re-sent blind, the saga asks);
 * - resolve: the operator states the outcome the saga could not learn (applied / not applied), with evidence;
 * - compensate: undo what succeeded, last first — refused after the pivot, and while the pivot's command is out;
 * - mark_compensated: the step the participant refused (or failed) to undo was undone by hand; compensation goes on;
 * - resume: automation back on (after a deadline past the pivot: the deadline is lifted and the flow goes forward);
 * - close: ends the saga as closed_manually; nothing more is sent.
 */
export type SagaActionKind = 'retry' | 'resolve' | 'compensate' | 'mark_compensated' | 'resume' | 'close';

export type SagaAction =
  | { kind: 'retry' }
  | { kind: 'resolve'; outcome: 'applied' | 'not_applied'; data?: unknown }
  | { kind: 'compensate' }
  | { kind: 'mark_compensated'; step: string }
  | { kind: 'resume' }
  | { kind: 'close' };

/** An action the saga's state does not allow, and why (what to do instead, where there is something). */
export interface Refusal {
  refused: string;
}

const ACTIONS: readonly SagaActionKind[] = ['retry', 'resolve', 'compensate', 'mark_compensated', 'resume', 'close'];

/** The actions allowed on a saga now: what the control plane offers (allowedActions) and what it accepts. */
export function allowedActions<D>(definition: SagaDefinition<D>, state: SagaState<D>): SagaActionKind[] {
  return ACTIONS.filter((kind) => refusal(definition, state, kind) === null);
}

/**
 * The transition an operator's action makes, or why it is refused. `cause` (the operator's reason) goes into the
 * history line; the caller writes the line with the operator as its actor.
 */
export function operatorTransition<D>(
  definition: SagaDefinition<D>,
  state: SagaState<D>,
  action: SagaAction,
  now: number,
  cause: string,
): Transition<D> | Refusal {
  const why = refusal(definition, state, action.kind);
  if (why !== null) return { refused: why };
  const t = decide(definition, state, action, now, cause);
  if ('refused' in t) return t;
  // The machine's lines start from the live status it was handed; the saga really left the one it was in.
  return { ...t, history: t.history.map((h, i) => (i === 0 ? { ...h, from: state.status } : h)) };
}

function decide<D>(
  definition: SagaDefinition<D>,
  state: SagaState<D>,
  action: SagaAction,
  now: number,
  cause: string,
): Transition<D> | Refusal {
  // The operator's decision unfreezes the saga: the machine's rules then apply to a live state.
  const live: SagaState<D> = { ...state, attentionReason: null, status: liveStatus(state) };
  switch (action.kind) {
    case 'retry':
      return retry(definition, live, now, cause);
    case 'resume':
      return resume(definition, state, live, now, cause);
    case 'resolve':
      if (action.outcome === 'applied') return succeed(definition, live, action.data ?? {}, now, cause);
      if (state.pivotPassed) {
        return { refused: `the saga is past its pivot: a step not applied there cannot be undone, only applied` };
      }
      return notApplied(definition, state, live, now, cause);
    case 'compensate': {
      // The step in flight is undone too when it can be (its compensation undoes it, or fences a command that
      // never ran), as on a deadline.
      const inFlight = definition.steps[state.step]!;
      const steps =
        inFlight.compensate && live.steps[state.step] === 'running'
          ? withStep(live.steps, state.step, 'succeeded')
          : live.steps;
      return compensateFrom(definition, advance(live, { steps }), state.step, now, cause, state);
    }
    case 'mark_compensated': {
      if (action.step !== definition.steps[state.step]!.name) {
        return {
          refused: `step ${action.step} is not the one being compensated (${definition.steps[state.step]!.name})`,
        };
      }
      const next = advance(live, { steps: withStep(live.steps, state.step, 'compensated') });
      return compensateFrom(definition, next, state.step - 1, now, cause, state);
    }
    case 'close': {
      const closed: SagaState<D> = { ...state, status: 'closed_manually', dueAt: null };
      return applied(state, closed, null, definition.steps[state.step]!.name, cause);
    }
  }
}

/** Why an action is not allowed on the saga now, or null when it is. */
function refusal<D>(definition: SagaDefinition<D>, state: SagaState<D>, kind: SagaActionKind): string | null {
  if (TERMINAL.has(state.status)) return `the saga is ${state.status}: nothing more can be done to it`;
  if (kind === 'close') return null;
  const step = definition.steps[state.step]!;
  const frozen = state.status === 'needs_attention';
  const reason = state.attentionReason;
  const compensating = state.direction === 'compensate';
  switch (kind) {
    case 'retry':
      if (frozen && (reason === 'failed_after_pivot' || reason === 'deadline_after_pivot')) {
        return `the saga needs a decision (${reason}), not another attempt: resolve the step, resume or close`;
      }
      return null;
    case 'resume':
      return frozen ? null : `the saga is ${state.status}, not frozen: nothing to resume`;
    case 'resolve':
      if (compensating) return `step ${step.name} is being compensated: mark it compensated once undone by hand`;
      if (frozen && reason === 'deadline_after_pivot') return `resume the saga to go on past its deadline`;
      if (!frozen && state.status !== 'running' && state.status !== 'resolving') {
        return `the saga is ${state.status}: no step outcome is open`;
      }
      return null;
    case 'compensate':
      if (state.pivotPassed) return 'the saga is past its pivot and forward-only: it is never compensated';
      if (compensating) return 'the saga is already compensating';
      if (step.pivot && state.steps[state.step] === 'running') {
        return `the pivot ${step.name}'s command is out and nothing undoes it: resolve it first`;
      }
      return null;
    case 'mark_compensated':
      if (!frozen || !compensating) return 'only a compensation that was refused or ran out of attempts can be marked';
      return null;
  }
}

/** The status a frozen saga had while its command was out. */
function liveStatus<D>(state: SagaState<D>): SagaState<D>['status'] {
  if (state.status !== 'needs_attention') return state.status;
  return state.direction === 'forward' ? 'running' : state.direction === 'query' ? 'resolving' : 'compensating';
}

/** One more attempt of the command out: a forward command is asked about (never sent blind), others re-sent. */
function retry<D>(definition: SagaDefinition<D>, live: SagaState<D>, now: number, cause: string): Transition<D> {
  if (live.direction === 'forward') return onUnanswered(definition, live, now, cause);
  const step = definition.steps[live.step]!;
  const next = advance(live, { attempt: live.attempt + 1, dueAt: now + step.timeoutMs });
  return applied(live, next, outgoing(definition, next), step.name, `${cause} (attempt ${next.attempt})`);
}

/**
 * Automation back on. After a deadline past the pivot the deadline is lifted: a pivot that applied goes on to
 * the next step, a command still out is asked about; any other frozen saga gets one more attempt.
 */
function resume<D>(
  definition: SagaDefinition<D>,
  frozen: SagaState<D>,
  live: SagaState<D>,
  now: number,
  cause: string,
): Transition<D> {
  if (frozen.attentionReason !== 'deadline_after_pivot') return retry(definition, live, now, cause);
  const lifted = { ...live, deadlineAt: null };
  if (lifted.steps[lifted.step] !== 'succeeded') return onUnanswered(definition, lifted, now, cause);
  // succeed() from the pivot's own state would fold its reply again: start the next step from a state that says
  // the pivot already succeeded.
  const nextIndex = lifted.step + 1;
  if (nextIndex >= definition.steps.length) {
    return applied(
      frozen,
      { ...lifted, status: 'completed', dueAt: null },
      null,
      definition.steps[lifted.step]!.name,
      cause,
    );
  }
  const next: SagaState<D> = {
    ...lifted,
    status: 'running',
    step: nextIndex,
    direction: 'forward',
    attempt: 1,
    steps: withStep(lifted.steps, nextIndex, 'running'),
    dueAt: now + definition.steps[nextIndex]!.timeoutMs,
  };
  return applied(frozen, next, outgoing(definition, next), definition.steps[nextIndex]!.name, cause);
}

/**
 * The operator says the step did not apply. Its command may still be on its way, so where the step has a
 * compensation it is sent too (undoing nothing, it fences the step at the participant: a late command is refused);
 * a step without one (the pivot) is taken at the operator's word.
 */
function notApplied<D>(
  definition: SagaDefinition<D>,
  frozen: SagaState<D>,
  live: SagaState<D>,
  now: number,
  cause: string,
): Transition<D> {
  const step = definition.steps[live.step]!;
  if (!step.compensate || live.direction === 'compensate') return refuse(definition, live, 'not_applied', now, cause);
  const steps = withStep(live.steps, live.step, 'succeeded');
  return compensateFrom(definition, advance(live, { steps }), live.step, now, cause, frozen);
}
