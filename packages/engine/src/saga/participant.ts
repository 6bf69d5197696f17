import type { Tx } from '../db/connect.ts';
import type { Envelope } from '../envelope/envelope.ts';
import { PermanentError } from '../errors.ts';
import type { Handler } from '../records/handler.ts';
import { enqueue } from '../outbox/enqueue.ts';
import { failpoint } from '../testing/failpoint.ts';
import {
  claimParticipation,
  lockParticipation,
  type Participation,
  recordParticipation,
  replyWritten,
} from '../queries/saga-participation.ts';
import { SAGA_EXTENSIONS } from './orchestrator.ts';
import type { Direction } from '../records/saga-state.ts';
import { REPLY } from './transition.ts';

/** What a step's apply decided: applied (with the success reply) or refused (a business refusal, nothing done). */
export interface StepOutcome {
  applied: boolean;
  /** The reply type: one of the step's success types when applied, one of its failure types when refused. */
  type: string;
  data?: unknown;
}

export interface ParticipantInput {
  /** Keys this participant's step records (one service may run several participants). */
  name: string;
  /** Applies a step's command with `tx` (the consumer's transaction, as any handler). */
  apply: (command: Envelope, tx: Tx) => Promise<StepOutcome>;
  /**
   * Undoes an applied step with `tx` — a new business action — given the reply it was applied with; 'refused'
   * when it cannot be undone (the saga then needs an operator). @defaultValue nothing to undo: compensated
   */
  compensate?: (command: Envelope, tx: Tx, applied: unknown) => Promise<'compensated' | 'refused'>;
}

/** The saga attributes of a command, from its CloudEvents extensions. */
interface StepCommand {
  sagaId: string;
  step: string;
  direction: Direction;
  attempt: number;
  key: string;
  replyTo: string;
}

/**
 * A consumer handler that makes a service a saga participant. Per step it keeps a record (applied, compensated
 * or fenced) in its own database, in the same transaction as the step's effect:
 * - a command is applied once by its step key; a repeat re-sends the first reply; a command for a step that was
 *   asked about or undone before it ran (fenced) is refused, nothing applied;
 * - the orchestrator's question (query) is answered applied / not applied, and a step never seen is fenced then;
 * - compensating a step that never ran succeeds with nothing to undo, and fences it.
 * The record is claimed (inserted if absent) before the decision, so deliveries of one step at once are decided
 * one after the other; a repeat answered from the record writes no second reply.
 */
export function participant(input: ParticipantInput): Handler {
  return async (event, tx) => {
    const command = stepCommand(event);
    const fresh = await claimParticipation(tx, input.name, command.key);
    const known = fresh ? undefined : await lockParticipation(tx, input.name, command.key);
    const reply = await decide(input, event, tx, command, known);
    // One reply per (step, direction, attempt): a repeat of a command already answered does not write it again.
    const aggregate = `saga:${command.sagaId}:${command.step}:${command.direction}`;
    if (known && (await replyWritten(tx, aggregate, command.attempt))) return;
    await enqueue(
      tx,
      {
        event_type: reply.type,
        // One reply stream per (saga, step, direction), one version per attempt: the reply consumer's version gate
        // and inbox then order and deduplicate them like any events.
        aggregate_id: aggregate,
        aggregate_version: command.attempt,
        data: reply.data ?? {},
        extensions: {
          [SAGA_EXTENSIONS.id]: command.sagaId,
          [SAGA_EXTENSIONS.step]: command.step,
          [SAGA_EXTENSIONS.direction]: command.direction,
          [SAGA_EXTENSIONS.attempt]: String(command.attempt),
        },
      },
      { topic: command.replyTo, producer: `participant:${input.name}` },
    );
  };
}

async function decide(
  input: ParticipantInput,
  event: Envelope,
  tx: Tx,
  command: StepCommand,
  known: Participation | undefined,
): Promise<{ type: string; data?: unknown }> {
  const record = (status: Participation['status'], result: Participation['result']) =>
    recordParticipation(tx, input.name, command.key, status, result);
  if (command.direction === 'forward') {
    if (known?.status === 'applied' && known.result) return known.result;
    if (known) return known.result && known.status === 'fenced' ? known.result : { type: REPLY.notApplied };
    const outcome = await input.apply(event, tx);
    failpoint('saga.participant.after-apply');
    const reply = { type: outcome.type, data: outcome.data ?? {} };
    await record(outcome.applied ? 'applied' : 'fenced', reply);
    return reply;
  }
  if (command.direction === 'query') {
    if (known?.status === 'applied' && known.result) return { type: REPLY.applied, data: known.result.data };
    if (!known) await record('fenced', null);
    return { type: REPLY.notApplied };
  }
  if (known?.status !== 'applied') {
    if (!known) await record('fenced', null); // undone before it ran: a late command must find it fenced
    return { type: REPLY.compensated };
  }
  const undone = input.compensate ? await input.compensate(event, tx, known.result?.data) : 'compensated';
  if (undone === 'refused') return { type: REPLY.compensationRefused };
  await record('compensated', known.result);
  return { type: REPLY.compensated };
}

function stepCommand(event: Envelope): StepCommand {
  const x = (event as Envelope & { extensions?: Record<string, string> }).extensions ?? {};
  const sagaId = x[SAGA_EXTENSIONS.id];
  const step = x[SAGA_EXTENSIONS.step];
  const direction = x[SAGA_EXTENSIONS.direction] as Direction | undefined;
  const attempt = Number(x[SAGA_EXTENSIONS.attempt]);
  const key = x[SAGA_EXTENSIONS.key];
  const replyTo = x[SAGA_EXTENSIONS.replyTo];
  if (!sagaId || !step || !key || !replyTo || !Number.isInteger(attempt) || attempt < 1) {
    throw new PermanentError(
      `event ${event.event_id} (${event.event_type}) is not a saga command: saga extensions missing`,
      {
        code: 'saga_command_invalid',
      },
    );
  }
  if (direction !== 'forward' && direction !== 'query' && direction !== 'compensate') {
    throw new PermanentError(
      `event ${event.event_id}: saga direction ${String(direction)} is not forward, query or compensate`,
      {
        code: 'saga_command_invalid',
      },
    );
  }
  return { sagaId, step, direction, attempt, key, replyTo };
}
