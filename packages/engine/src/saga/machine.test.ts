import assert from 'node:assert/strict';
import { test } from 'node:test';
import { defineSaga, INSPECT_COMMAND } from './definition.ts';
import { assertStale, type Data, Run, step, T0, threeSteps, undo, withPivot } from './machine.test-support.ts';
import { REPLY, type SagaEvent } from './transition.ts';

test('machine: happy path, three steps complete in order, each result folded into the data the next command sees', () => {
  const run = new Run(threeSteps);
  assert.equal(run.state.status, 'running');
  assert.equal(run.state.dueAt, T0 + 30_000);
  run.reply('reserve.done', { id: 'r1' });
  run.reply('charge.done', { id: 'c1' });
  run.reply('ship.done', { id: 's1' });
  assert.equal(run.state.status, 'completed');
  assert.deepEqual(run.commands(), [
    'reserve/forward#1 reserve.do',
    'charge/forward#1 charge.do',
    'ship/forward#1 ship.do',
  ]);
  assert.deepEqual(
    run.sent.map((o) => [o.topic, o.command.data]),
    [
      ['reserve.commands', { known: [] }],
      ['charge.commands', { known: ['reserve:r1'] }],
      ['ship.commands', { known: ['reserve:r1', 'charge:c1'] }],
    ],
  );
  assert.deepEqual(run.state.data, { log: ['reserve:r1', 'charge:c1', 'ship:s1'] });
  assert.deepEqual(run.state.steps, ['succeeded', 'succeeded', 'succeeded']);
  assert.equal(run.state.version, 4);
  assert.equal(run.state.dueAt, null);
  assert.deepEqual(
    run.history.map((h) => [h.from, h.to, h.step]),
    [
      [null, 'running', 'reserve'],
      ['running', 'running', 'reserve'],
      ['running', 'running', 'charge'],
      ['running', 'completed', 'ship'],
    ],
  );
});

test('machine: a refusal at step 2 compensates step 1, then the saga is compensated, in that order', () => {
  const run = new Run(threeSteps);
  run.reply('reserve.done', { id: 'r1' });
  run.reply('charge.refused');
  assert.equal(run.state.status, 'compensating');
  assert.equal(run.state.direction, 'compensate');
  assert.deepEqual(run.state.steps, ['succeeded', 'failed', 'pending']);
  run.reply(REPLY.compensated);
  assert.equal(run.state.status, 'compensated');
  assert.deepEqual(run.state.steps, ['compensated', 'failed', 'pending']);
  assert.deepEqual(run.commands(), [
    'reserve/forward#1 reserve.do',
    'charge/forward#1 charge.do',
    'reserve/compensate#1 reserve.undo',
  ]);
  assert.deepEqual(run.sent[2]!.command.data, { known: ['reserve:r1'] }, 'the compensation sees the reservation');
  assert.deepEqual(
    run.history.map((h) => [h.from, h.to, h.step]),
    [
      [null, 'running', 'reserve'],
      ['running', 'running', 'reserve'],
      ['running', 'compensating', 'reserve'],
      ['compensating', 'compensated', 'reserve'],
    ],
  );
  assert.equal(run.state.dueAt, null);
});

test('machine: a step without compensation is skipped when compensating; nothing to undo → compensated at once', () => {
  const skip = defineSaga<Data>({
    type: 'skip',
    version: 1,
    steps: [step('a', { compensate: undo('a') }), step('b'), step('c', { compensate: undo('c') }), step('d')],
  });
  const run = new Run(skip);
  run.reply('a.done');
  run.reply('b.done');
  run.reply('c.done');
  run.reply('d.refused');
  assert.equal(run.state.step, 2);
  run.reply(REPLY.compensated);
  assert.equal(run.state.step, 0, 'b has nothing to undo: straight to a');
  run.reply(REPLY.compensated);
  assert.equal(run.state.status, 'compensated');
  assert.deepEqual(run.commands().slice(4), ['c/compensate#1 c.undo', 'a/compensate#1 a.undo']);
  assert.deepEqual(run.state.steps, ['compensated', 'succeeded', 'compensated', 'failed']);

  const none = new Run(defineSaga<Data>({ type: 'none', version: 1, steps: [step('a'), step('b')] }));
  none.reply('a.done');
  const t = none.reply('b.refused');
  assert.equal(t.state.status, 'compensated');
  assert.equal(t.send, null);
  assert.deepEqual(
    t.history.map((h) => [h.from, h.to]),
    [['running', 'compensated']],
  );

  const first = new Run(threeSteps);
  assert.equal(first.reply('reserve.refused').state.status, 'compensated', 'the first step refused: nothing ran');
  assert.equal(first.sent.length, 1);
});

test('machine: a timeout asks (query) instead of guessing; applied continues as a success', () => {
  const run = new Run(threeSteps);
  run.reply('reserve.done', { id: 'r1' });
  assertStale(run, { kind: 'timeout', version: run.state.version }, run.state.dueAt! - 1);
  const asked = run.timeout();
  assert.equal(asked.state.status, 'resolving');
  assert.deepEqual([asked.state.step, asked.state.direction, asked.state.attempt], [1, 'query', 1]);
  assert.deepEqual(asked.send, {
    step: 'charge',
    direction: 'query',
    attempt: 1,
    topic: 'charge.commands',
    command: { type: INSPECT_COMMAND, data: {} },
  });
  assert.equal(asked.state.dueAt, run.now + 30_000);
  assertStale(run, {
    kind: 'reply',
    step: 'charge',
    direction: 'forward',
    attempt: 1,
    type: 'charge.unexpected',
    data: null,
  });
  run.reply(REPLY.applied, { id: 'c1' });
  assert.equal(run.state.status, 'running');
  assert.deepEqual(run.state.steps, ['succeeded', 'succeeded', 'running']);
  assert.deepEqual(run.state.data, { log: ['reserve:r1', 'charge:c1'] }, 'the answer of the query is folded in');
  run.reply('ship.done');
  assert.equal(run.state.status, 'completed');
  assert.deepEqual(run.commands(), [
    'reserve/forward#1 reserve.do',
    'charge/forward#1 charge.do',
    `charge/query#1 ${INSPECT_COMMAND}`,
    'ship/forward#1 ship.do',
  ]);

  // A participant that could not tell is treated like silence: ask.
  const unsure = new Run(threeSteps);
  assert.equal(unsure.reply(REPLY.unknown).state.status, 'resolving');
  assert.equal(unsure.reply(REPLY.unknown).state.attempt, 2, 'an unknown answer to the query asks again');
});

test('machine: a query answered not_applied compensates the steps before it', () => {
  const run = new Run(threeSteps);
  run.reply('reserve.done');
  run.reply('charge.done');
  run.timeout();
  run.reply(REPLY.notApplied);
  assert.equal(run.state.status, 'compensating');
  assert.deepEqual(run.state.steps, ['succeeded', 'succeeded', 'not_applied']);
  run.reply(REPLY.compensated);
  run.reply(REPLY.compensated);
  assert.equal(run.state.status, 'compensated');
  assert.deepEqual(run.commands().slice(3), [
    `ship/query#1 ${INSPECT_COMMAND}`,
    'charge/compensate#1 charge.undo',
    'reserve/compensate#1 reserve.undo',
  ]);
  assert.deepEqual(run.state.steps, ['compensated', 'compensated', 'not_applied']);
});

test('machine: a query unanswered after maxAttempts needs attention (query_unanswered), nothing more sent', () => {
  const run = new Run(threeSteps);
  run.reply('reserve.done');
  run.timeout(); // charge: maxAttempts 3
  run.timeout();
  run.timeout();
  assert.deepEqual(run.commands().slice(2), [
    `charge/query#1 ${INSPECT_COMMAND}`,
    `charge/query#2 ${INSPECT_COMMAND}`,
    `charge/query#3 ${INSPECT_COMMAND}`,
  ]);
  const t = run.timeout();
  assert.equal(t.state.status, 'needs_attention');
  assert.equal(t.state.attentionReason, 'query_unanswered');
  assert.equal(t.send, null);
  assert.equal(t.state.dueAt, null);
  assert.deepEqual(
    t.history.map((h) => [h.from, h.to, h.step]),
    [['resolving', 'needs_attention', 'charge']],
  );
  assertStale(run, { kind: 'reply', step: 'charge', direction: 'query', attempt: 3, type: REPLY.applied, data: null });
  assertStale(run, { kind: 'timeout', version: run.state.version }, run.now + 60_000);
});

test('machine: compensation refused needs attention, and nothing more is ever sent', () => {
  const run = new Run(withPivot);
  run.reply('reserve.done');
  run.reply('charge.done');
  run.reply('ship.refused');
  assert.equal(run.state.step, 1);
  const t = run.reply(REPLY.compensationRefused);
  assert.equal(t.state.status, 'needs_attention');
  assert.equal(t.state.attentionReason, 'compensation_refused');
  assert.equal(t.send, null);
  assert.deepEqual(
    t.history.map((h) => [h.from, h.to, h.step]),
    [['compensating', 'needs_attention', 'charge']],
  );
  const frozen = run.state;
  const sent = run.sent.length;
  for (const event of [
    { kind: 'reply', step: 'charge', direction: 'compensate', attempt: 1, type: REPLY.compensated, data: null },
    { kind: 'reply', step: 'reserve', direction: 'compensate', attempt: 1, type: REPLY.compensated, data: null },
    { kind: 'timeout', version: frozen.version },
    { kind: 'timeout', version: frozen.version - 1 },
    { kind: 'deadline' },
  ] satisfies SagaEvent[]) {
    assertStale(run, event, run.now + 700_000);
  }
  assert.equal(run.sent.length, sent);
  assert.equal(run.state, frozen);
});

test('machine: a compensation unanswered is sent again, each step with its own budget, then budget_exhausted', () => {
  const run = new Run(threeSteps);
  run.reply('reserve.done');
  run.reply('charge.done');
  run.reply('ship.refused');
  run.timeout(); // charge: maxAttempts 3
  run.reply(REPLY.unknown);
  run.reply(REPLY.compensated);
  run.timeout(); // reserve: maxAttempts 5, fresh
  assert.deepEqual(run.commands().slice(3), [
    'charge/compensate#1 charge.undo',
    'charge/compensate#2 charge.undo',
    'charge/compensate#3 charge.undo',
    'reserve/compensate#1 reserve.undo',
    'reserve/compensate#2 reserve.undo',
  ]);
  run.timeout();
  run.timeout();
  run.timeout();
  const t = run.timeout();
  assert.equal(t.state.status, 'needs_attention');
  assert.equal(t.state.attentionReason, 'budget_exhausted');
  assert.equal(run.sent.filter((o) => o.step === 'reserve' && o.direction === 'compensate').length, 5);
});

test('machine: a refusal after the pivot needs attention (failed_after_pivot), never compensates', () => {
  const run = new Run(withPivot);
  run.reply('reserve.done');
  run.reply('charge.done');
  run.reply('ship.done');
  assert.equal(run.state.pivotPassed, true);
  const t = run.reply('notify.refused');
  assert.equal(t.state.status, 'needs_attention');
  assert.equal(t.state.attentionReason, 'failed_after_pivot');
  assert.equal(t.send, null);
  assert.deepEqual(t.state.steps, ['succeeded', 'succeeded', 'succeeded', 'failed']);
  assert.equal(t.history[0]!.step, 'notify');

  const asked = new Run(withPivot);
  asked.reply('reserve.done');
  asked.reply('charge.done');
  asked.reply('ship.done');
  asked.timeout();
  assert.equal(asked.reply(REPLY.notApplied).state.attentionReason, 'failed_after_pivot');
  assert.ok(asked.sent.every((o) => o.direction !== 'compensate'));

  // The pivot itself refused: it did not happen, so the saga is still before it and compensates.
  const pivotRefused = new Run(withPivot);
  pivotRefused.reply('reserve.done');
  pivotRefused.reply('charge.done');
  assert.equal(pivotRefused.reply('ship.refused').state.status, 'compensating');
});

test('machine: a deadline before the pivot compensates, the in-flight step first when it has a compensation', () => {
  const run = new Run(withPivot);
  run.reply('reserve.done');
  assertStale(run, { kind: 'deadline' }, run.state.deadlineAt! - 1);
  const t = run.deadline();
  assert.equal(t.state.status, 'compensating');
  assert.deepEqual(t.send && [t.send.step, t.send.direction, t.send.attempt], ['charge', 'compensate', 1]);
  assert.deepEqual(
    t.history.map((h) => [h.from, h.to, h.cause]),
    [['running', 'compensating', 'deadline passed']],
  );
  assertStale(run, {
    kind: 'reply',
    step: 'charge',
    direction: 'forward',
    attempt: 1,
    type: 'charge.done',
    data: null,
  });
  assertStale(run, { kind: 'deadline' }, run.now + 1);
  run.reply(REPLY.compensated);
  run.reply(REPLY.compensated);
  assert.equal(run.state.status, 'compensated');
  assert.deepEqual(run.commands().slice(2), ['charge/compensate#1 charge.undo', 'reserve/compensate#1 reserve.undo']);

  // The in-flight step has nothing to undo: only the steps before it are compensated.
  const plain = new Run(
    defineSaga<Data>({
      type: 'plain',
      version: 1,
      deadlineMs: 5_000,
      steps: [step('a', { compensate: undo('a') }), step('b'), step('c')],
    }),
  );
  plain.reply('a.done');
  plain.timeout(); // b is resolving: a deadline there compensates too
  plain.deadline();
  assert.deepEqual(plain.commands(), [
    'a/forward#1 a.do',
    'b/forward#1 b.do',
    `b/query#1 ${INSPECT_COMMAND}`,
    'a/compensate#1 a.undo',
  ]);

  // No deadline defined: a deadline event is stale.
  const free = new Run(threeSteps);
  assertStale(free, { kind: 'deadline' }, T0 + 10 * 86_400_000);
});

test('machine: a deadline after the pivot needs attention (deadline_after_pivot)', () => {
  const run = new Run(withPivot);
  run.reply('reserve.done');
  run.reply('charge.done');
  run.reply('ship.done');
  const t = run.deadline();
  assert.equal(t.state.status, 'needs_attention');
  assert.equal(t.state.attentionReason, 'deadline_after_pivot');
  assert.equal(t.send, null);
  assert.deepEqual(
    t.history.map((h) => [h.from, h.to, h.step]),
    [['running', 'needs_attention', 'notify']],
  );
  assert.ok(run.sent.every((o) => o.direction !== 'compensate'));
});

test('machine: a deadline while the pivot is in flight asks it first; the answer decides', () => {
  const pivotOut = () => {
    const run = new Run(withPivot);
    run.reply('reserve.done');
    run.reply('charge.done');
    return run;
  };

  // Its command may still apply, and it cannot be undone: no compensation before it answers.
  const notApplied = pivotOut();
  const asked = notApplied.deadline();
  assert.equal(asked.state.status, 'resolving');
  assert.deepEqual(asked.send && [asked.send.step, asked.send.direction], ['ship', 'query']);
  assertStale(notApplied, { kind: 'deadline' }, notApplied.now + 1);
  notApplied.reply(REPLY.notApplied); // the participant fenced it: safe to undo the rest
  assert.equal(notApplied.state.status, 'compensating');
  notApplied.reply(REPLY.compensated);
  notApplied.reply(REPLY.compensated);
  assert.equal(notApplied.state.status, 'compensated');

  const applied = pivotOut();
  applied.deadline();
  const t = applied.reply(REPLY.applied);
  assert.equal(t.state.status, 'needs_attention');
  assert.equal(t.state.attentionReason, 'deadline_after_pivot');
  assert.equal(t.state.pivotPassed, true);
  assert.ok(applied.sent.every((o) => o.direction !== 'compensate'));

  // Already asking when the deadline comes: wait for the answer.
  const resolving = pivotOut();
  resolving.timeout();
  assertStale(resolving, { kind: 'deadline' }, resolving.state.deadlineAt!);

  // The pivot was the last step: applied after the deadline still completes (nothing left to run or undo).
  const last = new Run(
    defineSaga<Data>({
      type: 'last',
      version: 1,
      deadlineMs: 5_000,
      steps: [step('reserve', { compensate: undo('reserve') }), step('ship', { pivot: true })],
    }),
  );
  last.reply('reserve.done');
  last.deadline();
  assert.equal(last.reply(REPLY.applied).state.status, 'completed');
});

test('machine: stale events (other step, direction, attempt, unexpected type, old timer, after the end) change nothing', () => {
  const run = new Run(threeSteps);
  run.reply('reserve.done');
  const oldVersion = run.state.version - 1;
  const at = (over: Partial<Extract<SagaEvent, { kind: 'reply' }>>): SagaEvent => ({
    kind: 'reply',
    step: 'charge',
    direction: 'forward',
    attempt: 1,
    type: 'charge.done',
    data: null,
    ...over,
  });
  for (const event of [
    at({ step: 'reserve', type: 'reserve.done' }), // a duplicate of the previous reply
    at({ step: 'ship', type: 'ship.done' }),
    at({ step: 'no-such-step' }),
    at({ direction: 'query', type: REPLY.applied }),
    at({ direction: 'compensate', type: REPLY.compensated }),
    at({ attempt: 2 }),
    at({ attempt: 0 }),
    at({ type: 'charge.something-else' }),
    at({ type: REPLY.applied }),
    at({ type: REPLY.compensated }),
    at({ type: REPLY.compensationRefused }),
    { kind: 'timeout', version: oldVersion },
    { kind: 'timeout', version: run.state.version + 1 },
  ] satisfies SagaEvent[]) {
    assertStale(run, event, run.state.dueAt! + 1);
  }

  // An old attempt's "could not tell", once the query was sent again (an old "applied" is a fact: late-facts test).
  run.timeout();
  run.timeout();
  assert.equal(run.state.attempt, 2);
  assertStale(run, at({ direction: 'query', attempt: 1, type: REPLY.unknown }));
  assertStale(run, at({ direction: 'query', attempt: 3, type: REPLY.applied }));
  assertStale(run, { kind: 'timeout', version: run.state.version - 1 }, run.state.dueAt!);

  run.reply(REPLY.applied);
  run.reply('ship.done');
  assert.equal(run.state.status, 'completed');
  for (const event of [
    at({ step: 'ship', type: 'ship.done' }),
    at({ step: 'ship', type: REPLY.unknown }),
    { kind: 'timeout', version: run.state.version },
    { kind: 'deadline' },
  ] satisfies SagaEvent[]) {
    assertStale(run, event, run.now + 86_400_000);
  }
});

test('machine: late facts about the step being asked about or undone settle it; a slow participant does not exhaust the questions', () => {
  // The step's own reply, late, while the saga asks: it says what happened, with the step's result.
  const late = new Run(threeSteps);
  late.reply('reserve.done', { id: 'r1' });
  late.timeout();
  assert.equal(late.state.status, 'resolving');
  late.reply('charge.done', { id: 'c1' }, { direction: 'forward', attempt: 1 });
  assert.equal(late.state.status, 'running');
  assert.deepEqual(late.state.data.log, ['reserve:r1', 'charge:c1']);
  assert.equal(late.history.at(-1)!.cause, 'late forward #1: charge.done');

  // A refusal arriving late is a refusal: compensate what went before.
  const refused = new Run(threeSteps);
  refused.reply('reserve.done');
  refused.timeout();
  refused.reply('charge.refused', null, { direction: 'forward', attempt: 1 });
  assert.equal(refused.state.status, 'compensating');
  assert.deepEqual(refused.state.steps, ['succeeded', 'failed', 'pending']);

  // The answer to the first question, after the second was sent.
  const asked = new Run(threeSteps);
  asked.reply('reserve.done');
  asked.timeout();
  asked.timeout();
  assert.equal(asked.state.attempt, 2);
  asked.reply(REPLY.notApplied, null, { attempt: 1 });
  assert.equal(asked.state.status, 'compensating', 'not applied (and fenced): a refusal');

  // An earlier compensation's success, after it was sent again.
  const undo = new Run(threeSteps);
  undo.reply('reserve.done');
  undo.reply('charge.refused');
  undo.timeout();
  assert.equal(undo.state.attempt, 2);
  undo.reply(REPLY.compensated, null, { attempt: 1 });
  assert.equal(undo.state.status, 'compensated');
  assert.equal(
    undo.reply(REPLY.compensated, null, { attempt: 2 }).verdict,
    'stale',
    'the second answer changes nothing',
  );
});
