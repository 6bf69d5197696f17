import { randomUUID } from 'node:crypto';
import type { Queryable, Sql } from '../db/connect.ts';
import { ActionRefusedError, ConfigError, NotFoundError } from '../errors.ts';
import { insertAudit } from '../queries/audit.ts';
import { enqueue } from '../outbox/enqueue.ts';
import { recordIgnoredReply } from '../queries/saga-reply-ignored.ts';
import { insertSagaHistory } from '../queries/saga-history.ts';
import { registerDefinitions, unfinishedVersions } from '../queries/saga-definition.ts';
import { insertSaga, lockSaga, sagaIdByBusinessKey, saveSaga } from '../queries/saga-instance.ts';
import { sqlExecutor } from '../db/sql-executor.ts';
import type { SqlExecutor } from '../ports/sql-executor.ts';
import type { SagaDefinition } from './definition.ts';
import { SagaDefinitionMissingError, SagaTransitionError } from './errors.ts';
import { nextState, startState } from './machine.ts';
import { allowedActions, operatorTransition, type SagaAction, type SagaActionKind } from './operator-actions.ts';
import { type Direction, type SagaState, TERMINAL } from '../records/saga-state.ts';
import type { Outgoing, SagaEvent, Transition } from './transition.ts';

// A registry of definitions of different data types.
type AnyDefinition = SagaDefinition<any>;

/** A participant's reply as the orchestrator's consumer hands it over (from the reply event and its extensions). */
export interface SagaReply {
  eventId: string;
  sagaId: string;
  step: string;
  direction: Direction;
  attempt: number;
  type: string;
  data: unknown;
}

export type ReplyVerdict = 'applied' | 'stale' | 'unknown_saga' | 'definition_missing';

/** The CloudEvents extension attributes a saga command carries, and its reply echoes. */
export const SAGA_EXTENSIONS = {
  id: 'sagaid',
  type: 'sagatype',
  step: 'sagastep',
  direction: 'sagadirection',
  attempt: 'sagaattempt',
  key: 'idempotencykey',
  replyTo: 'replyto',
} as const;

/**
 * Runs sagas: starts them in the caller's business transaction, and moves them on replies and timers, each in
 * one transaction — lock the saga row, run the state machine (machine.ts), compare-and-set the row by its version,
 * write the next command to the outbox (aggregate `saga:<id>`, version = the saga's new version, so one
 * transition can never send twice) and the history line. A reply that changes nothing is recorded, never applied.
 */
export class SagaOrchestrator {
  // Definitions of any data type: each saga's data is handled by its own definition's functions.
  readonly #definitions = new Map<string, AnyDefinition>();

  constructor(definitions: ReadonlyArray<AnyDefinition>) {
    for (const d of definitions) {
      const key = definitionKey(d.type, d.version);
      const known = this.#definitions.get(key);
      if (known && known.shapeHash !== d.shapeHash) {
        throw new ConfigError(
          `saga ${d.type} v${d.version} is defined twice with different shapes: give one a new version`,
        );
      }
      this.#definitions.set(key, d);
    }
  }

  /**
   * Checks, before a process drives sagas, that it runs what the instances in flight were started with: a
   * definition whose shape changed without a new version is refused (the first shape run under a version is
   * stored), and so is a process that does not load a version unfinished sagas of a type it runs still need.
   * Throws ConfigError saying what to change.
   */
  async register(sql: Sql): Promise<void> {
    const defs = this.definitions();
    const stored = await registerDefinitions(
      sql,
      defs.map((d) => ({
        type: d.type,
        version: d.version,
        shapeHash: d.shapeHash,
        steps: d.steps.map((s) => s.name),
      })),
    );
    for (const row of stored) {
      const d = this.#definitions.get(definitionKey(row.type, row.version))!;
      if (row.shapeHash !== d.shapeHash) {
        throw new ConfigError(
          `saga ${d.type} v${d.version} changed shape since it was first run (steps then: ${row.steps.join(' → ')}; now: ${d.steps.map((s) => s.name).join(' → ')}): give the new shape a new version and keep v${d.version} loaded until its sagas finish`,
        );
      }
    }
    const types = new Set(defs.map((d) => d.type));
    const missing = (await unfinishedVersions(sql)).filter(
      (u) => types.has(u.type) && !this.#definitions.has(definitionKey(u.type, u.version)),
    );
    if (missing.length > 0) {
      const list = missing.map((m) => `${m.count} of ${m.type} v${m.version}`).join(', ');
      throw new ConfigError(
        `unfinished sagas need definitions this process does not load (${list}): keep those versions registered until they finish`,
      );
    }
  }

  /**
   * Starts a saga inside the caller's transaction (postgres.js's tx, or any client through its adapter, as enqueue);
   * a second start with the same business key returns the first
   * saga (created: false) and sends nothing.
   */
  async start<D>(
    tx: Queryable | SqlExecutor,
    definition: SagaDefinition<D>,
    input: { businessKey: string; data: D; now?: number },
  ): Promise<{ sagaId: string; created: boolean }> {
    if (!this.#definitions.has(definitionKey(definition.type, definition.version))) {
      throw new ConfigError(`saga ${definition.type} v${definition.version} is not registered with this orchestrator`);
    }
    const t = counted(
      startState(definition, {
        id: randomUUID(),
        businessKey: input.businessKey,
        data: input.data,
        now: input.now ?? Date.now(),
      }),
    );
    const executor = sqlExecutor(tx);
    if (!(await insertSaga(executor, t.state))) {
      const first = await sagaIdByBusinessKey(executor, definition.type, input.businessKey);
      return { sagaId: first!, created: false };
    }
    await this.#write(executor, definition, t);
    return { sagaId: t.state.id, created: true };
  }

  /**
   * Applies a participant's reply, in the reply consumer's transaction (the inbox has absorbed duplicates). Throws
   * SagaDefinitionMissingError (transient) for a live saga of a version this process does not load.
   */
  async onReply(tx: Queryable, reply: SagaReply, now = Date.now()): Promise<ReplyVerdict> {
    const state = isUuid(reply.sagaId) ? await lockSaga(tx, reply.sagaId) : undefined;
    if (!state) {
      await ignore(tx, reply, 'no such saga');
      return 'unknown_saga';
    }
    const definition = this.#definitions.get(definitionKey(state.type, state.definitionVersion));
    if (!definition) {
      // A live saga's reply waits (transient) for a process that loads the version; an ended or frozen one's
      // changes nothing wherever it is applied.
      if (!TERMINAL.has(state.status) && state.status !== 'needs_attention')
        throw new SagaDefinitionMissingError(state.id, state.type, state.definitionVersion);
      await ignore(tx, reply, `saga is ${state.status} (${state.type} v${state.definitionVersion} not loaded here)`);
      return 'definition_missing';
    }
    const event: SagaEvent = { kind: 'reply', ...reply };
    const t = counted(computed(state.id, () => nextState(definition, state, event, now)));
    if (t.verdict === 'stale') {
      await ignore(tx, reply, staleReason(state, reply));
      return 'stale';
    }
    await this.#save(tx, definition, state, t);
    return 'applied';
  }

  /**
   * A saga's timer fired: its command's timeout (fenced by the version it was armed at) and its deadline are
   * checked against the row. A late timer finds a newer version and does nothing.
   */
  async onTimer(tx: Queryable, sagaId: string, version: number, now = Date.now()): Promise<'applied' | 'stale'> {
    const state = await lockSaga(tx, sagaId);
    if (!state) return 'stale';
    const definition = this.#definitions.get(definitionKey(state.type, state.definitionVersion));
    if (!definition) return 'stale';
    let t = computed(sagaId, () => nextState(definition, state, { kind: 'deadline' }, now));
    if (t.verdict === 'stale')
      t = computed(sagaId, () => nextState(definition, state, { kind: 'timeout', version }, now));
    if (t.verdict === 'stale') return 'stale';
    await this.#save(tx, definition, state, counted(t));
    return 'applied';
  }

  /**
   * An operator's action on a saga (operator-actions.ts), in the caller's transaction: the transition with its
   * history line under the operator's name, and the audit record with the state before and after. Refused
   * (ActionRefusedError, nothing changed) when the saga's state does not allow it.
   */
  async act(
    tx: Queryable,
    sagaId: string,
    action: SagaAction,
    by: { actor: string; reason: string },
    now = Date.now(),
  ): Promise<{ before: SagaState; after: SagaState }> {
    const state = isUuid(sagaId) ? await lockSaga(tx, sagaId) : undefined;
    if (!state) throw new NotFoundError(`saga ${sagaId}`);
    const definition = this.definitionOf(state);
    if (!definition) {
      throw new ActionRefusedError(
        'saga_definition_missing',
        `saga ${sagaId} runs ${state.type} v${state.definitionVersion}, which this process does not load`,
      );
    }
    const t = operatorTransition(definition, state, action, now, `${action.kind} by ${by.actor}: ${by.reason}`);
    if ('refused' in t) {
      throw new ActionRefusedError(
        'saga_action_refused',
        `saga ${sagaId} (${state.status}): ${action.kind} refused: ${t.refused}`,
      );
    }
    const next = counted(t);
    await this.#save(tx, definition, state, next, by.actor);
    await insertAudit(tx, {
      actor: by.actor,
      action: `saga.${action.kind}`,
      reason: by.reason,
      target: sagaId,
      before: summary(state),
      after: { ...summary(next.state), ...(action.kind === 'resolve' ? { outcome: action.outcome } : {}) },
    });
    return { before: state, after: next.state };
  }

  /** What an operator may do to the saga now; nothing when this process does not load its definition. */
  allowedActions(state: SagaState): SagaActionKind[] {
    const definition = this.definitionOf(state);
    return definition ? allowedActions(definition, state) : [];
  }

  /** The definition a saga instance runs (its type at the version it started with), if this process loads it. */
  definitionOf(state: Pick<SagaState, 'type' | 'definitionVersion'>): AnyDefinition | undefined {
    return this.#definitions.get(definitionKey(state.type, state.definitionVersion));
  }

  /** The definitions this orchestrator runs. */
  definitions(): AnyDefinition[] {
    return [...this.#definitions.values()];
  }

  async #save(
    tx: Queryable,
    definition: AnyDefinition,
    previous: SagaState,
    t: Transition<unknown>,
    actor = 'postbox',
  ): Promise<void> {
    // The row is locked, so this cannot lose; the check keeps a caller that skipped the lock from writing over.
    if (!(await saveSaga(tx, t.state, previous.version))) {
      throw new ConfigError(`saga ${previous.id} moved past version ${previous.version} during its transition`);
    }
    await this.#write(sqlExecutor(tx), definition, t, actor);
  }

  async #write(tx: SqlExecutor, definition: AnyDefinition, t: Transition<unknown>, actor = 'postbox'): Promise<void> {
    await insertSagaHistory(tx, t.state.id, t.state.version, t.history, actor);
    if (t.send) await send(tx, definition, t.state, t.send);
  }
}

/** A transition computed by the definition's functions; one that throws is the saga's permanent failure. */
function computed<D>(sagaId: string, fn: () => Transition<D>): Transition<D> {
  try {
    return fn();
  } catch (cause) {
    throw new SagaTransitionError(sagaId, cause);
  }
}

/** Counts the command a transition sends against its step: that count is the command's version on the step's aggregate. */
function counted<D>(t: Transition<D>): Transition<D> {
  if (!t.send) return t;
  const sends = [...t.state.sends];
  sends[t.state.step] = (sends[t.state.step] ?? 0) + 1;
  return { ...t, state: { ...t.state, sends } };
}

/**
 * A command into the outbox, on the step's own aggregate (`saga:<id>:<step>`, one topic, so its participant sees
 * versions 1, 2, 3 in order), at the step's send count: one transition can never send twice.
 */
async function send(tx: SqlExecutor, definition: AnyDefinition, state: SagaState, out: Outgoing): Promise<void> {
  await enqueue(
    tx,
    {
      event_type: out.command.type,
      aggregate_id: `saga:${state.id}:${out.step}`,
      aggregate_version: state.sends[state.step]!,
      data: out.command.data,
      extensions: {
        [SAGA_EXTENSIONS.id]: state.id,
        [SAGA_EXTENSIONS.type]: state.type,
        [SAGA_EXTENSIONS.step]: out.step,
        [SAGA_EXTENSIONS.direction]: out.direction,
        [SAGA_EXTENSIONS.attempt]: String(out.attempt),
        [SAGA_EXTENSIONS.key]: stepKey(state.id, out.step),
        [SAGA_EXTENSIONS.replyTo]: definition.replyTopic,
      },
    },
    { topic: out.topic, producer: `saga:${state.type}` },
  );
}

/** The idempotency key of a saga step, the same for its command, query and compensation and every attempt. */
export function stepKey(sagaId: string, step: string): string {
  return `${sagaId}:${step}`;
}

function staleReason(state: SagaState, reply: SagaReply): string {
  if (
    state.status === 'needs_attention' ||
    state.status === 'completed' ||
    state.status === 'compensated' ||
    state.status === 'closed_manually'
  ) {
    return `saga is ${state.status}`;
  }
  return `expected a reply to ${state.direction} #${state.attempt} of step ${state.step}, got ${reply.direction} #${reply.attempt} of ${reply.step} (${reply.type})`;
}

function ignore(tx: Queryable, reply: SagaReply, reason: string): Promise<void> {
  return recordIgnoredReply(tx, {
    eventId: reply.eventId,
    sagaId: reply.sagaId,
    replyType: reply.type,
    step: reply.step,
    direction: reply.direction,
    attempt: Number.isInteger(reply.attempt) ? reply.attempt : null,
    reason,
  });
}

/** The part of a saga's state an audit record keeps, before and after an action. */
function summary(s: SagaState): Record<string, unknown> {
  return {
    status: s.status,
    step: s.step,
    direction: s.direction,
    attempt: s.attempt,
    version: s.version,
    steps: s.steps,
    attentionReason: s.attentionReason,
  };
}

function definitionKey(type: string, version: number): string {
  return `${type}@${version}`;
}

function isUuid(value: string): boolean {
  return /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(value);
}
