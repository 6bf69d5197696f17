import type { SagaCommand } from './definition.ts';

/**
 * A saga instance's states:
 *
 *   running ──reply: success──▶ running (next step) … ──last step──▶ completed
 *      │ ╲──timeout / unknown──▶ resolving ──query: applied──▶ running (as success)
 *      │                            │  └──query: not applied──▶ (as a refusal)
 *      └──refusal (before the pivot)──▶ compensating ──each succeeded step undone, last first──▶ compensated
 *
 * needs_attention freezes the saga (no command, no timer) with a reason, until an operator acts; closed_manually
 * is where an operator ends it. A refusal or a deadline after the pivot never compensates: needs_attention.
 */
export type SagaStatus =
  | 'running'
  | 'resolving'
  | 'compensating'
  | 'completed'
  | 'compensated'
  | 'needs_attention'
  | 'closed_manually';

export const TERMINAL: ReadonlySet<SagaStatus> = new Set(['completed', 'compensated', 'closed_manually']);

/** Which command of a step is out: the step itself, the question whether it applied, or its undoing. */
export type Direction = 'forward' | 'query' | 'compensate';

export type StepStatus = 'pending' | 'running' | 'succeeded' | 'failed' | 'not_applied' | 'compensated';

export type AttentionReason =
  | 'compensation_refused'
  | 'query_unanswered'
  | 'budget_exhausted'
  | 'failed_after_pivot'
  | 'deadline_after_pivot'
  /** No process loads the saga's definition version, past the grace period (SagaTimerRunner). */
  | 'definition_missing'
  /** Its transition failed for good (a definition function threw, a command over the envelope limit). */
  | 'transition_failed';

export interface SagaState<D = unknown> {
  id: string;
  type: string;
  definitionVersion: number;
  businessKey: string;
  status: SagaStatus;
  /** The step whose command is out (forward, query or compensation). */
  step: number;
  direction: Direction;
  /** Sends of the current command so far (1-based); replies name it, so a late one is told apart. */
  attempt: number;
  /** Bumped by every transition: the compare-and-set key, and the fence of timers armed before it. */
  version: number;
  data: D;
  steps: StepStatus[];
  /**
   * Commands sent to each step so far (forward, queries, compensations): the outbox version of the next one on
   * the step's own aggregate, so a participant's consumer sees each step's commands numbered 1, 2, 3 without gaps.
   */
  sends: number[];
  pivotPassed: boolean;
  attentionReason: AttentionReason | null;
  /** When the command out now counts as unanswered (epoch ms); null when nothing is out. */
  dueAt: number | null;
  deadlineAt: number | null;
}

/** Reply types with a meaning for every saga (the participant SDK sends them). */
export const REPLY = {
  /** The query's answer: the step was applied (its reply data is the step's result). */
  applied: 'postbox.saga.applied',
  /** The query's answer: the step was not applied, and is now fenced (a late command is refused). */
  notApplied: 'postbox.saga.not_applied',
  /** The compensation was applied (or there was nothing to undo). */
  compensated: 'postbox.saga.compensated',
  /** The participant cannot undo the step (a refund declined, goods gone). */
  compensationRefused: 'postbox.saga.compensation_refused',
  /** The participant could not tell what happened (its own retries ran out). */
  unknown: 'postbox.saga.unknown',
} as const;

/** What happens to a saga: a reply to its current command, its command's timeout, or its deadline. */
export type SagaEvent =
  | { kind: 'reply'; step: string; direction: Direction; attempt: number; type: string; data: unknown }
  | { kind: 'timeout'; version: number }
  | { kind: 'deadline' };

/** A command to send in the transition's transaction (through the outbox). */
export interface Outgoing {
  step: string;
  direction: Direction;
  attempt: number;
  topic: string;
  command: SagaCommand;
}

export interface HistoryEntry {
  from: SagaStatus | null;
  to: SagaStatus;
  step: string | null;
  direction: Direction | null;
  cause: string;
}

/** The outcome of one event: `stale` changes nothing (a late or duplicate reply, a fenced timer). */
export interface Transition<D = unknown> {
  verdict: 'applied' | 'stale';
  state: SagaState<D>;
  send: Outgoing | null;
  history: HistoryEntry[];
}
