import type { Direction, HistoryEntry, SagaState } from '../records/saga-state.ts';
import type { SagaCommand } from './definition.ts';

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

/** The outcome of one event: `stale` changes nothing (a late or duplicate reply, a fenced timer). */
export interface Transition<D = unknown> {
  verdict: 'applied' | 'stale';
  state: SagaState<D>;
  send: Outgoing | null;
  history: HistoryEntry[];
}
