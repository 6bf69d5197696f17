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
/** Every status a saga can be in, in the order an operator reads them (live first, then ended, then frozen). */
export const SAGA_STATUSES = [
  'running',
  'resolving',
  'compensating',
  'completed',
  'compensated',
  'needs_attention',
  'closed_manually',
] as const;

export type SagaStatus = (typeof SAGA_STATUSES)[number];

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

export interface HistoryEntry {
  from: SagaStatus | null;
  to: SagaStatus;
  step: string | null;
  direction: Direction | null;
  cause: string;
}
