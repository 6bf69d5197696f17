import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../errors.ts';
import { defineSaga, INSPECT_COMMAND, type SagaInput, type StepInput } from './definition.ts';

type Data = { orderId: string };

function step(name: string, extra: Partial<StepInput<Data>> = {}): StepInput<Data> {
  return {
    name,
    topic: `${name}.commands`,
    command: (d) => ({ type: `${name}.do`, data: d }),
    success: [`${name}.done`],
    failure: [`${name}.refused`],
    ...extra,
  };
}

function saga(extra: Partial<SagaInput<Data>> = {}): SagaInput<Data> {
  return { type: 'order', version: 1, steps: [step('reserve'), step('charge'), step('ship')], ...extra };
}

const undo = (d: Data) => ({ type: 'undo', data: d });

function refused(input: SagaInput<Data>, message: RegExp): void {
  assert.throws(
    () => defineSaga(input),
    (e: unknown) => e instanceof ConfigError && message.test(e.message),
    String(message),
  );
}

test('defineSaga resolves defaults once: timeouts, attempts, reply topic, no deadline, inspect query, no pivot', () => {
  const d = defineSaga(saga());
  assert.equal(d.replyTopic, 'postbox.saga.order.replies');
  assert.equal(d.deadlineMs, null);
  assert.equal(d.pivot, -1);
  assert.deepEqual(
    d.steps.map((s) => [s.index, s.timeoutMs, s.maxAttempts, s.pivot, s.compensate]),
    [
      [0, 30_000, 5, false, null],
      [1, 30_000, 5, false, null],
      [2, 30_000, 5, false, null],
    ],
  );
  const first = d.steps[0]!;
  assert.deepEqual(first.query({ orderId: 'o1' }), { type: INSPECT_COMMAND, data: {} });
  assert.deepEqual(first.onSuccess({ orderId: 'o1' }, { anything: true }), { orderId: 'o1' });
  assert.match(d.shapeHash, /^[0-9a-f]{16}$/);
});

test('defineSaga keeps what was given: pivot index, deadline, reply topic, per-step budgets', () => {
  const d = defineSaga(
    saga({
      steps: [
        step('reserve', { compensate: undo, timeoutMs: 500, maxAttempts: 2 }),
        step('ship', { pivot: true }),
        step('notify'),
      ],
      deadlineMs: 60_000,
      replyTopic: 'orders.saga-replies',
    }),
  );
  assert.equal(d.pivot, 1);
  assert.equal(d.deadlineMs, 60_000);
  assert.equal(d.replyTopic, 'orders.saga-replies');
  assert.equal(d.steps[0]!.timeoutMs, 500);
  assert.equal(d.steps[0]!.maxAttempts, 2);
  assert.equal(typeof d.steps[0]!.compensate, 'function');
  assert.equal(d.steps[1]!.pivot, true);
});

test('defineSaga copies the reply type lists: a later change to the input does not reach the definition', () => {
  const success = ['reserve.done'];
  const d = defineSaga(saga({ steps: [step('reserve', { success })] }));
  success.push('reserve.maybe');
  assert.deepEqual(d.steps[0]!.success, ['reserve.done']);
});

test('defineSaga refuses a duplicate step name, naming the step', () => {
  refused(saga({ steps: [step('reserve'), step('reserve')] }), /step "reserve": step names must be unique/);
});

test('defineSaga refuses a pivot with a compensation', () => {
  refused(
    saga({ steps: [step('reserve'), step('ship', { pivot: true, compensate: undo })] }),
    /step "ship": the pivot step is forward-only and has no compensation/,
  );
});

test('defineSaga refuses a compensation after the pivot', () => {
  refused(
    saga({ steps: [step('ship', { pivot: true }), step('invoice', { compensate: undo })] }),
    /step "invoice": steps after the pivot are forward-only, no compensation/,
  );
});

test('defineSaga refuses two pivots, naming both', () => {
  refused(
    saga({ steps: [step('ship', { pivot: true }), step('invoice', { pivot: true })] }),
    /at most one pivot step \(ship, invoice\)/,
  );
});

test('defineSaga refuses a reply type that means both success and failure', () => {
  refused(
    saga({ steps: [step('charge', { success: ['charge.done', 'charge.ok'], failure: ['charge.ok'] })] }),
    /step "charge": reply type charge.ok cannot mean both success and failure/,
  );
});

test('defineSaga refuses a bad version, timeout, attempts or deadline, saying the bound', () => {
  const bad: Array<[SagaInput<Data>, RegExp]> = [
    [saga({ version: 0 }), /version must be an integer ≥ 1/],
    [saga({ version: 1.5 }), /version must be an integer ≥ 1/],
    [saga({ version: Number.NaN }), /version must be an integer ≥ 1/],
    [saga({ steps: [step('reserve', { timeoutMs: 99 })] }), /step "reserve": timeoutMs must be an integer ≥ 100/],
    [saga({ steps: [step('reserve', { timeoutMs: 150.5 })] }), /timeoutMs must be an integer ≥ 100/],
    [saga({ steps: [step('reserve', { maxAttempts: 0 })] }), /step "reserve": maxAttempts must be an integer ≥ 1/],
    [saga({ deadlineMs: 999 }), /deadlineMs must be an integer ≥ 1000/],
    [saga({ deadlineMs: Number.POSITIVE_INFINITY }), /deadlineMs must be an integer ≥ 1000/],
  ];
  for (const [input, message] of bad) refused(input, message);
});

test('defineSaga refuses a bad type or step name, no steps, no topic, no success reply type', () => {
  refused(saga({ type: '9lives' }), /saga "9lives": type must match/);
  refused(saga({ steps: [] }), /needs at least one step/);
  refused(saga({ steps: [step('has space')] }), /step "has space": name must match/);
  refused(saga({ steps: [step('reserve', { topic: '' })] }), /step "reserve": topic is required/);
  refused(saga({ steps: [step('reserve', { success: [] })] }), /step "reserve": name at least one success reply type/);
});

test('defineSaga: the shape hash changes with the shape', () => {
  const base = defineSaga(saga()).shapeHash;
  const variants: Array<[string, SagaInput<Data>]> = [
    ['a step renamed', saga({ steps: [step('reserve'), step('pay'), step('ship')] })],
    ['a step added', saga({ steps: [step('reserve'), step('charge'), step('ship'), step('notify')] })],
    ['steps reordered', saga({ steps: [step('charge'), step('reserve'), step('ship')] })],
    ['a topic', saga({ steps: [step('reserve', { topic: 'stock.commands' }), step('charge'), step('ship')] })],
    ['a success type', saga({ steps: [step('reserve', { success: ['reserve.ok'] }), step('charge'), step('ship')] })],
    ['a failure type', saga({ steps: [step('reserve', { failure: [] }), step('charge'), step('ship')] })],
    ['the pivot', saga({ steps: [step('reserve'), step('charge'), step('ship', { pivot: true })] })],
    ['a compensation added', saga({ steps: [step('reserve', { compensate: undo }), step('charge'), step('ship')] })],
    ['the saga type', saga({ type: 'order2' })],
    ['the reply topic', saga({ replyTopic: 'elsewhere' })],
  ];
  const hashes = new Set([base]);
  for (const [what, input] of variants) {
    const h = defineSaga(input).shapeHash;
    assert.notEqual(h, base, what);
    hashes.add(h);
  }
  assert.equal(hashes.size, variants.length + 1, 'every variant hashes differently');
});

test('defineSaga: the shape hash ignores function bodies, budgets, the deadline and the version', () => {
  const base = defineSaga(saga({ steps: [step('reserve', { compensate: undo }), step('charge')] })).shapeHash;
  const same = defineSaga({
    type: 'order',
    version: 7,
    deadlineMs: 120_000,
    steps: [
      step('reserve', {
        command: (d) => ({ type: 'reserve.do.v2', data: { id: d.orderId, extra: 1 } }),
        compensate: (d) => ({ type: 'release', data: d.orderId }),
        onSuccess: (d) => ({ ...d, reserved: true }),
        timeoutMs: 1000,
        maxAttempts: 9,
      }),
      step('charge', { command: () => ({ type: 'charge.other', data: null }) }),
    ],
  }).shapeHash;
  assert.equal(same, base);
});
