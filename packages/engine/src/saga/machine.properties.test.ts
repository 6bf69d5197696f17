/**
 * Properties of the saga state machine: random definitions (1–5 steps, a pivot or none, compensations where
 * allowed, small budgets) driven by random events, every rule checked after every event. The examples are in
 * machine.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { defineSaga, INSPECT_COMMAND, type SagaDefinition } from './definition.ts';
import { nextState, startState } from './machine.ts';
import { allowedActions, operatorTransition, type SagaAction } from './operator-actions.ts';
import { type Direction, type SagaState, type SagaStatus, TERMINAL } from '../records/saga-state.ts';
import { REPLY, type SagaEvent, type Transition } from './transition.ts';

type Data = { log: string[] };

const T0 = 1_000_000;

interface Shape {
  pivot: number;
  compensate: boolean[];
  attempts: number[];
  timeouts: number[];
  deadline: number | null;
}

const shape: fc.Arbitrary<Shape> = fc.integer({ min: 1, max: 5 }).chain((n) =>
  fc.record({
    pivot: fc.integer({ min: -1, max: n - 1 }),
    compensate: fc.array(fc.boolean(), { minLength: n, maxLength: n }),
    attempts: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: n, maxLength: n }),
    timeouts: fc.array(fc.integer({ min: 100, max: 1000 }), { minLength: n, maxLength: n }),
    deadline: fc.option(fc.integer({ min: 1000, max: 6000 }), { nil: null }),
  }),
);

function build(s: Shape): SagaDefinition<Data> {
  return defineSaga<Data>({
    type: 'prop',
    version: 1,
    deadlineMs: s.deadline ?? undefined,
    steps: s.attempts.map((maxAttempts, i) => ({
      name: `s${i}`,
      topic: `t${i}`,
      command: (d: Data) => ({ type: `s${i}.do`, data: d.log.length }),
      success: [`s${i}.ok`],
      failure: [`s${i}.no`],
      onSuccess: (d: Data) => ({ log: [...d.log, `s${i}`] }),
      compensate:
        s.compensate[i] && (s.pivot < 0 || i < s.pivot)
          ? (d: Data) => ({ type: `s${i}.undo`, data: d.log })
          : undefined,
      pivot: i === s.pivot,
      timeoutMs: s.timeouts[i]!,
      maxAttempts,
    })),
  });
}

/** A reply's meaning: the step's own types, the shared ones, one nobody expects, or one that fits the command out. */
type ReplyKind =
  | 'success'
  | 'failure'
  | 'unknown'
  | 'applied'
  | 'not_applied'
  | 'compensated'
  | 'refused'
  | 'garbage'
  | 'fitting';

/** An event before it meets the state: which command it aims at, and how much time passes first. */
type Intent =
  | { kind: 'reply'; aim: 'current' | 'step' | 'direction' | 'attempt'; reply: ReplyKind; pick: number; dt: number }
  | { kind: 'timeout'; aim: 'current' | 'old' | 'early'; pick: number; dt: number }
  | { kind: 'deadline'; early: boolean; dt: number };

const dt = fc.integer({ min: 0, max: 400 });
const replyKinds: ReplyKind[] = [
  'success',
  'failure',
  'unknown',
  'applied',
  'not_applied',
  'compensated',
  'refused',
  'garbage',
];

const intent: fc.Arbitrary<Intent> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('reply' as const),
      aim: fc.constantFrom('current', 'current', 'current', 'step', 'direction', 'attempt'),
      reply: fc.oneof({ weight: 2, arbitrary: fc.constant('fitting' as const) }, fc.constantFrom(...replyKinds)),
      pick: fc.nat(11),
      dt,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('timeout' as const),
      aim: fc.constantFrom('current', 'current', 'old', 'early'),
      pick: fc.nat(11),
      dt,
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('deadline' as const), early: fc.boolean(), dt }) },
);

const DIRECTIONS: Direction[] = ['forward', 'query', 'compensate'];

function replyType(definition: SagaDefinition<Data>, index: number, kind: ReplyKind, pick: number, d: Direction) {
  const s = definition.steps[index]!;
  switch (kind) {
    case 'success':
      return s.success[0]!;
    case 'failure':
      return s.failure[0]!;
    case 'unknown':
      return REPLY.unknown;
    case 'applied':
      return REPLY.applied;
    case 'not_applied':
      return REPLY.notApplied;
    case 'compensated':
      return REPLY.compensated;
    case 'refused':
      return REPLY.compensationRefused;
    case 'garbage':
      return 'x.unexpected';
    case 'fitting':
      if (d === 'forward') return pick % 3 === 2 ? s.failure[0]! : s.success[0]!;
      if (d === 'query') return pick % 3 === 2 ? REPLY.notApplied : REPLY.applied;
      return pick % 4 === 3 ? REPLY.compensationRefused : REPLY.compensated;
  }
}

/** Turns an intent into an event against the state now, and the (never earlier) time it happens at. */
function realize(
  definition: SagaDefinition<Data>,
  s: SagaState<Data>,
  now: number,
  i: Intent,
): { event: SagaEvent; at: number } {
  const n = definition.steps.length;
  if (i.kind === 'timeout') {
    const version = i.aim === 'old' ? s.version - 1 - (i.pick % s.version) : s.version;
    const at = i.aim === 'early' ? now + i.dt : Math.max(now + i.dt, s.dueAt ?? 0);
    return { event: { kind: 'timeout', version }, at };
  }
  if (i.kind === 'deadline') {
    return { event: { kind: 'deadline' }, at: i.early ? now + i.dt : Math.max(now + i.dt, s.deadlineAt ?? 0) };
  }
  let index = s.step;
  let name = definition.steps[s.step]!.name;
  let direction = s.direction;
  let attempt = s.attempt;
  if (i.aim === 'step') {
    index = n === 1 ? s.step : (s.step + 1 + (i.pick % (n - 1))) % n;
    name = n === 1 ? 'ghost' : definition.steps[index]!.name;
  } else if (i.aim === 'direction') {
    direction = DIRECTIONS.filter((x) => x !== s.direction)[i.pick % 2]!;
  } else if (i.aim === 'attempt') {
    attempt = i.pick % 2 === 0 && s.attempt > 1 ? s.attempt - 1 : s.attempt + 1 + (i.pick % 3);
  }
  const type = replyType(definition, index, i.reply, i.pick, direction);
  return { event: { kind: 'reply', step: name, direction, attempt, type, data: null }, at: now + i.dt };
}

const LIVE: ReadonlySet<SagaStatus> = new Set(['running', 'resolving', 'compensating']);
const DIRECTION_OF: Record<string, Direction> = { running: 'forward', resolving: 'query', compensating: 'compensate' };

/** What the rules say an event must do, from the state alone: applied, or stale. */
function expectedVerdict(definition: SagaDefinition<Data>, s: SagaState<Data>, event: SagaEvent, now: number) {
  if (!LIVE.has(s.status)) return 'stale';
  const out = definition.steps[s.step]!;
  if (event.kind === 'timeout') return event.version === s.version && now >= s.dueAt! ? 'applied' : 'stale';
  if (event.kind === 'deadline') {
    if (s.deadlineAt === null || now < s.deadlineAt || s.status === 'compensating') return 'stale';
    return out.pivot && s.direction === 'query' ? 'stale' : 'applied';
  }
  if (event.step !== out.name) return 'stale';
  if (event.direction !== s.direction || event.attempt !== s.attempt) {
    // Late facts about the step out: its forward reply while asked about, an earlier question's answer, an
    // earlier compensation's success.
    const fact =
      (s.direction === 'query' &&
        event.direction === 'forward' &&
        event.attempt === 1 &&
        [...out.success, ...out.failure].includes(event.type)) ||
      (s.direction === 'query' &&
        event.direction === 'query' &&
        event.attempt < s.attempt &&
        (event.type === REPLY.applied || event.type === REPLY.notApplied)) ||
      (s.direction === 'compensate' &&
        event.direction === 'compensate' &&
        event.attempt < s.attempt &&
        event.type === REPLY.compensated);
    return fact ? 'applied' : 'stale';
  }
  const expected =
    s.direction === 'forward'
      ? [...out.success, ...out.failure, REPLY.unknown]
      : s.direction === 'query'
        ? [REPLY.applied, REPLY.notApplied, REPLY.unknown]
        : [REPLY.compensated, REPLY.compensationRefused, REPLY.unknown];
  return expected.includes(event.type) ? 'applied' : 'stale';
}

/** What the run has seen so far, for the rules that span transitions. */
interface Seen {
  lastForward: number;
  lastCompensated: number;
  applied: number;
  history: number;
  ended: boolean;
}

/** The rules every applied transition keeps (the start included: `previous` null). */
function checkApplied(
  definition: SagaDefinition<Data>,
  previous: SagaState<Data> | null,
  t: Transition<Data>,
  event: SagaEvent | null,
  now: number,
  seen: Seen,
): void {
  const s = t.state;
  const names = definition.steps.map((x) => x.name);
  seen.applied++;
  seen.history += t.history.length;
  assert.equal(seen.history, seen.applied, 'one history line per applied transition');
  assert.equal(t.history.length, 1);
  const h = t.history[0]!;
  assert.equal(h.from, previous?.status ?? null);
  assert.equal(h.to, s.status);
  assert.ok(h.step !== null && names.includes(h.step), `history names its step: ${JSON.stringify(h)}`);
  assert.equal(s.version, (previous?.version ?? 0) + 1, 'the version moves by exactly one');
  assert.ok(!previous?.pivotPassed || s.pivotPassed, 'the pivot, once passed, stays passed');
  assert.equal(s.pivotPassed, definition.pivot >= 0 && s.steps[definition.pivot] === 'succeeded');
  assert.ok(
    s.data.log.every((x, k) => x === names[k]),
    `data folded once per step, in order: ${s.data.log}`,
  );
  assert.ok(s.steps.filter((x) => x === 'running').length <= 1);

  const step = definition.steps[s.step]!;
  if (LIVE.has(s.status)) {
    const send = t.send;
    assert.ok(send, `a live saga (${s.status}) always has a command out`);
    assert.deepEqual(
      [send.step, send.direction, send.attempt, send.topic],
      [step.name, s.direction, s.attempt, step.topic],
    );
    assert.equal(s.direction, DIRECTION_OF[s.status]);
    assert.equal(s.dueAt, now + step.timeoutMs);
    assert.equal(s.attentionReason, null);
    assert.ok(s.attempt >= 1 && s.attempt <= step.maxAttempts);
    if (s.direction !== 'compensate') {
      assert.equal(s.steps[s.step], 'running');
      assert.ok(s.steps.slice(0, s.step).every((x) => x === 'succeeded'));
      assert.ok(s.steps.slice(s.step + 1).every((x) => x === 'pending'));
    }
    if (send.direction === 'forward') {
      assert.equal(send.attempt, 1, 'a step command is sent once; then the saga asks');
      assert.ok(s.step > seen.lastForward, 'forward commands go strictly upward');
      assert.equal(seen.lastCompensated, Number.POSITIVE_INFINITY, 'no step command after compensation began');
      seen.lastForward = s.step;
      assert.deepEqual(send.command, step.command(s.data));
    } else if (send.direction === 'query') {
      assert.equal(s.step, seen.lastForward, 'the query asks about the step last sent');
      assert.deepEqual(send.command, { type: INSPECT_COMMAND, data: {} });
    } else {
      assert.ok(step.compensate, 'only a step with a compensation is compensated');
      assert.ok(!s.pivotPassed, 'no compensation once the pivot passed');
      const inFlight = event?.kind === 'deadline' && previous?.step === s.step;
      assert.ok(
        previous?.steps[s.step] === 'succeeded' || inFlight,
        `compensates a succeeded step (or the one in flight on a deadline): ${previous?.steps} → ${s.step}`,
      );
      assert.equal(s.steps[s.step], 'succeeded');
      assert.ok(s.step <= seen.lastForward, 'compensates only a step that was sent');
      if (send.attempt === 1) assert.ok(s.step < seen.lastCompensated, 'compensations go strictly downward');
      else assert.equal(s.step, seen.lastCompensated, 'a compensation sent again is the same step');
      seen.lastCompensated = s.step;
      if (definition.pivot >= 0) {
        const pivot = s.steps[definition.pivot];
        assert.ok(
          pivot === 'pending' || pivot === 'failed' || pivot === 'not_applied',
          `no compensation while the pivot may apply (pivot ${pivot})`,
        );
      }
      assert.deepEqual(send.command, step.compensate(s.data));
    }
  } else {
    assert.equal(t.send, null, `nothing sent on reaching ${s.status}`);
    assert.equal(s.dueAt, null);
    assert.equal(s.attentionReason !== null, s.status === 'needs_attention');
    seen.ended = true;
  }
  if (s.status === 'completed') {
    assert.ok(s.steps.every((x) => x === 'succeeded'));
    assert.deepEqual(s.data.log, names);
  }
  if (s.status === 'compensated') {
    assert.ok(
      definition.steps.every((x, k) => !x.compensate || s.steps[k] !== 'succeeded'),
      `compensated leaves no undoable step succeeded: ${s.steps}`,
    );
    assert.ok(!s.pivotPassed);
  }
}

/** Drives one saga through the intents, checking every rule after every event; returns the applied count. */
function drive(definition: SagaDefinition<Data>, intents: Intent[], stopWhenEnded = false): Seen {
  const seen: Seen = {
    lastForward: -1,
    lastCompensated: Number.POSITIVE_INFINITY,
    applied: 0,
    history: 0,
    ended: false,
  };
  let now = T0;
  let t = startState(definition, { id: 'p', businessKey: 'k', data: { log: [] }, now });
  checkApplied(definition, null, t, null, now, seen);
  for (const i of intents) {
    if (stopWhenEnded && seen.ended) break;
    const previous = t.state;
    const { event, at } = realize(definition, previous, now, i);
    assert.ok(at >= now);
    now = at;
    t = nextState(definition, previous, event, now);
    const expected = expectedVerdict(definition, previous, event, now);
    if (t.verdict !== expected)
      assert.fail(`${t.verdict}, expected ${expected}: ${JSON.stringify({ previous, event, now })}`);
    if (t.verdict === 'stale') {
      assert.equal(t.state, previous, 'a stale event changes nothing');
      assert.equal(t.send, null);
      assert.deepEqual(t.history, []);
      continue;
    }
    assert.ok(!seen.ended, 'nothing applies after the end or needs_attention');
    checkApplied(definition, previous, t, event, now, seen);
  }
  return seen;
}

test('machine (property): any definition, any events: every rule holds after every event', () => {
  fc.assert(
    fc.property(shape, fc.array(intent, { minLength: 1, maxLength: 60 }), (s, intents) => {
      drive(build(s), intents);
    }),
    { numRuns: 3000 },
  );
});

/** Only answers to the command out (any fitting type or unknown), timers when due, deadlines when passed. */
const onTime: fc.Arbitrary<Intent> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('reply' as const),
      aim: fc.constant('current' as const),
      reply: fc.constantFrom('fitting' as const, 'fitting' as const, 'unknown' as const),
      pick: fc.nat(11),
      dt,
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('timeout' as const),
      aim: fc.constant('current' as const),
      pick: fc.nat(),
      dt,
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('deadline' as const), early: fc.constant(false), dt }) },
);

const cycle = fc.array(onTime, { minLength: 1, maxLength: 20 }).filter((c) => c.some((i) => i.kind !== 'deadline'));

test('machine (property): a saga always ends (terminal or needs_attention) within its budgets', () => {
  fc.assert(
    fc.property(shape, cycle, (s, cycle) => {
      const definition = build(s);
      // The start, then per step: its command, its queries, its compensations (each transition leaves one of them).
      const bound = definition.steps.reduce((sum, x) => sum + 1 + 2 * x.maxAttempts, 1);
      // Every intent but a deadline moves a live saga: this many always suffice.
      const intents = Array.from({ length: (bound + 1) * cycle.length }, (_, k) => cycle[k % cycle.length]!);
      const seen = drive(definition, intents, true);
      assert.ok(seen.ended, `not ended after ${seen.applied} transitions`);
      assert.ok(seen.applied <= bound, `${seen.applied} transitions, bound ${bound}`);
    }),
    { numRuns: 2000 },
  );
});

/** An operator's action, aimed at whatever step is out (mark_compensated names it, or another one). */
const operatorAction: fc.Arbitrary<{ action: SagaAction['kind']; outcome: boolean; wrongStep: boolean }> = fc.record({
  action: fc.constantFrom('retry', 'resolve', 'compensate', 'mark_compensated', 'resume', 'close'),
  outcome: fc.boolean(),
  wrongStep: fc.boolean(),
});

test('operators (property): an action is applied exactly when allowed, by the machine rules; refused ones change nothing', () => {
  fc.assert(
    fc.property(
      shape,
      fc.array(fc.oneof({ weight: 3, arbitrary: intent }, { weight: 1, arbitrary: operatorAction }), {
        minLength: 1,
        maxLength: 60,
      }),
      (sh, steps) => {
        const definition = build(sh);
        let now = T0;
        let state = startState(definition, { id: 'p', businessKey: 'k', data: { log: [] }, now }).state;
        for (const s of steps) {
          const previous = state;
          if ('kind' in s) {
            const { event, at } = realize(definition, previous, now, s);
            now = at;
            const t = nextState(definition, previous, event, now);
            if (t.send?.direction === 'compensate') assert.ok(!previous.pivotPassed);
            state = t.state;
            continue;
          }
          const name = definition.steps[previous.step]!.name;
          const action: SagaAction =
            s.action === 'resolve'
              ? { kind: 'resolve', outcome: s.outcome ? 'applied' : 'not_applied' }
              : s.action === 'mark_compensated'
                ? { kind: 'mark_compensated', step: s.wrongStep ? 'ghost' : name }
                : { kind: s.action };
          const allowed = allowedActions(definition, previous).includes(s.action);
          const t = operatorTransition(definition, previous, action, now, 'prop');
          if ('refused' in t) {
            assert.equal(typeof t.refused, 'string');
            // allowed and still refused: only a detail of the action (wrong step, not applied after the pivot).
            if (allowed) assert.ok(action.kind === 'mark_compensated' || action.kind === 'resolve', t.refused);
            continue;
          }
          assert.ok(allowed, `${s.action} applied but not offered on ${previous.status}`);
          assert.ok(!TERMINAL.has(previous.status), 'nothing is done to an ended saga');
          assert.equal(t.state.version, previous.version + 1);
          assert.equal(t.history.length, 1);
          assert.equal(t.history[0]!.from, previous.status);
          assert.equal(t.history[0]!.to, t.state.status);
          if (t.send?.direction === 'forward') assert.notEqual(action.kind, 'retry', 'a retry never re-sends blind');
          if (t.send?.direction === 'compensate') assert.ok(!previous.pivotPassed, 'no compensation after the pivot');
          if (LIVE.has(t.state.status)) assert.ok(t.send, `a live saga has a command out after ${action.kind}`);
          if (action.kind === 'close') {
            assert.equal(t.state.status, 'closed_manually');
            assert.equal(t.send, null);
          }
          state = t.state;
        }
      },
    ),
    { numRuns: 2000 },
  );
});
