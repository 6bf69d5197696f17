// The saga machine's test driver, shared by machine.test.ts and operator-actions.test.ts (not shipped: the build
// excludes *.test-support.ts).
import assert from 'node:assert/strict';
import { defineSaga, type SagaDefinition, type StepInput } from './definition.ts';
import { nextState, startState } from './machine.ts';
import { operatorTransition, type SagaAction } from './operator-actions.ts';
import type { HistoryEntry, SagaState } from '../records/saga-state.ts';
import type { Outgoing, SagaEvent, Transition } from './transition.ts';

export type Data = { log: string[] };

export const T0 = 1_000_000;

/** A step whose command carries what the saga knows so far, and whose success folds the reply's id in. */
export function step(name: string, extra: Partial<StepInput<Data>> = {}): StepInput<Data> {
  return {
    name,
    topic: `${name}.commands`,
    command: (d) => ({ type: `${name}.do`, data: { known: d.log } }),
    success: [`${name}.done`],
    failure: [`${name}.refused`],
    onSuccess: (d, reply) => ({ log: [...d.log, `${name}:${(reply as { id?: string } | null)?.id ?? '?'}`] }),
    ...extra,
  };
}

export const undo = (name: string) => (d: Data) => ({ type: `${name}.undo`, data: { known: d.log } });

/** reserve and charge can be undone, ship is a plain last step. */
export const threeSteps = defineSaga<Data>({
  type: 'order',
  version: 1,
  steps: [
    step('reserve', { compensate: undo('reserve') }),
    step('charge', { compensate: undo('charge'), maxAttempts: 3 }),
    step('ship'),
  ],
});

/** ship is the pivot: forward-only from there. */
export const withPivot = defineSaga<Data>({
  type: 'order',
  version: 1,
  deadlineMs: 600_000,
  steps: [
    step('reserve', { compensate: undo('reserve') }),
    step('charge', { compensate: undo('charge') }),
    step('ship', { pivot: true }),
    step('notify'),
  ],
});

/** Feeds events to the machine the way the orchestrator would, keeping every command and history line. */
export class Run {
  readonly definition: SagaDefinition<Data>;
  now: number;
  last: Transition<Data>;
  readonly sent: Outgoing[] = [];
  readonly history: HistoryEntry[] = [];

  constructor(definition: SagaDefinition<Data>) {
    this.definition = definition;
    this.now = T0;
    this.last = startState(definition, { id: 'saga-1', businessKey: 'order-1', data: { log: [] }, now: T0 });
    this.keep(this.last);
  }

  get state(): SagaState<Data> {
    return this.last.state;
  }

  feed(event: SagaEvent, at = this.now): Transition<Data> {
    this.now = Math.max(this.now, at);
    this.last = nextState(this.definition, this.state, event, this.now);
    this.keep(this.last);
    return this.last;
  }

  /** A reply to the command out now (or, with `over`, to another one). */
  reply(type: string, data: unknown = null, over: Partial<Extract<SagaEvent, { kind: 'reply' }>> = {}) {
    const s = this.state;
    const current = { step: this.definition.steps[s.step]!.name, direction: s.direction, attempt: s.attempt };
    return this.feed({ kind: 'reply', ...current, type, data, ...over });
  }

  /** The current command's timer, fired when due. */
  timeout() {
    return this.feed({ kind: 'timeout', version: this.state.version }, this.state.dueAt ?? this.now);
  }

  deadline() {
    return this.feed({ kind: 'deadline' }, this.state.deadlineAt ?? this.now);
  }

  /** An operator's action; returns the refusal's reason, or null when it was applied. */
  act(action: SagaAction, cause = `${action.kind} by ops: test`): string | null {
    const t = operatorTransition(this.definition, this.state, action, this.now, cause);
    if ('refused' in t) return t.refused;
    this.last = t;
    this.keep(t);
    return null;
  }

  /** The commands sent so far, as `step/direction#attempt type`. */
  commands(): string[] {
    return this.sent.map((o) => `${o.step}/${o.direction}#${o.attempt} ${o.command.type}`);
  }

  private keep(t: Transition<Data>): void {
    if (t.send) this.sent.push(t.send);
    this.history.push(...t.history);
  }
}

export function assertStale(run: Run, event: SagaEvent, at = run.now): void {
  const before = run.state;
  const sentBefore = run.sent.length;
  const t = run.feed(event, at);
  assert.equal(t.verdict, 'stale', JSON.stringify(event));
  assert.equal(t.state, before, 'a stale event leaves the very same state');
  assert.equal(t.send, null);
  assert.deepEqual(t.history, []);
  assert.equal(run.sent.length, sentBefore);
}
