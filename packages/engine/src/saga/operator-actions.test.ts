import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Run, threeSteps, withPivot } from './machine.test-support.ts';
import { allowedActions } from './operator-actions.ts';
import { REPLY } from './transition.ts';

/** A saga frozen because its participant refused to undo `charge` (reserve, charge done; ship refused). */
function refusedCompensation(): Run {
  const run = new Run(threeSteps);
  run.reply('reserve.done', { id: 'r1' });
  run.reply('charge.done', { id: 'c1' });
  run.reply('ship.refused');
  run.reply(REPLY.compensationRefused);
  assert.equal(run.state.status, 'needs_attention');
  assert.equal(run.state.attentionReason, 'compensation_refused');
  return run;
}

test('operator: a refused compensation marked compensated by hand goes on undoing the steps before it, last first', () => {
  const run = refusedCompensation();
  assert.deepEqual(allowedActions(threeSteps, run.state), ['retry', 'mark_compensated', 'resume', 'close']);
  assert.match(
    run.act({ kind: 'mark_compensated', step: 'reserve' }) ?? '',
    /not the one being compensated \(charge\)/,
  );
  assert.equal(run.act({ kind: 'mark_compensated', step: 'charge' }), null);
  assert.equal(run.state.status, 'compensating');
  assert.equal(run.state.attentionReason, null);
  assert.deepEqual(run.state.steps, ['succeeded', 'compensated', 'failed']);
  assert.deepEqual(run.commands().slice(-1), ['reserve/compensate#1 reserve.undo']);
  assert.deepEqual(run.history.at(-1), {
    from: 'needs_attention',
    to: 'compensating',
    step: 'reserve',
    direction: 'compensate',
    cause: 'mark_compensated by ops: test',
  });
  run.reply(REPLY.compensated);
  assert.equal(run.state.status, 'compensated');
});

test('operator: retry re-sends the refused compensation as a new attempt; the old attempt’s refusal is stale', () => {
  const run = refusedCompensation();
  const version = run.state.version;
  assert.equal(run.act({ kind: 'retry' }), null);
  assert.equal(run.state.status, 'compensating');
  assert.equal(run.state.version, version + 1);
  assert.deepEqual(run.commands().slice(-1), ['charge/compensate#2 charge.undo']);
  assert.equal(run.state.dueAt, run.now + threeSteps.steps[1]!.timeoutMs);
  assert.equal(run.reply(REPLY.compensationRefused, null, { attempt: 1 }).verdict, 'stale');
  run.reply(REPLY.compensated);
  run.reply(REPLY.compensated);
  assert.equal(run.state.status, 'compensated');
  assert.deepEqual(run.state.steps, ['compensated', 'compensated', 'failed']);
});

test('operator: retry of a forward command asks the participant instead of sending the command blind again', () => {
  const run = new Run(threeSteps);
  assert.equal(run.act({ kind: 'retry' }), null);
  assert.equal(run.state.status, 'resolving');
  assert.deepEqual(run.commands(), ['reserve/forward#1 reserve.do', 'reserve/query#1 postbox.saga.inspect']);
});

test('operator: an unanswered query resolved applied goes on as a success with the given data; not applied compensates', () => {
  const applied = new Run(threeSteps);
  applied.reply('reserve.done', { id: 'r1' });
  applied.timeout();
  for (let i = 0; i < 5; i++) applied.timeout();
  assert.equal(applied.state.attentionReason, 'query_unanswered');
  assert.deepEqual(allowedActions(threeSteps, applied.state), ['retry', 'resolve', 'compensate', 'resume', 'close']);
  assert.equal(applied.act({ kind: 'resolve', outcome: 'applied', data: { id: 'c9' } }), null);
  assert.equal(applied.state.status, 'running');
  assert.equal(applied.state.step, 2);
  assert.deepEqual(applied.state.data.log, ['reserve:r1', 'charge:c9']);

  const notApplied = new Run(threeSteps);
  notApplied.reply('reserve.done', { id: 'r1' });
  for (let i = 0; i < 6; i++) notApplied.timeout();
  assert.equal(notApplied.act({ kind: 'resolve', outcome: 'not_applied' }), null);
  // The step may still be on its way: its compensation goes out first (it fences it), then the one before it.
  assert.equal(notApplied.state.status, 'compensating');
  assert.deepEqual(notApplied.commands().slice(-1), ['charge/compensate#1 charge.undo']);
  notApplied.reply(REPLY.compensated);
  assert.deepEqual(notApplied.commands().slice(-1), ['reserve/compensate#1 reserve.undo']);
  notApplied.reply(REPLY.compensated);
  assert.equal(notApplied.state.status, 'compensated');
});

test('operator: compensateSaga is refused after the pivot and while the pivot is out, allowed before it', () => {
  const past = new Run(withPivot);
  past.reply('reserve.done');
  past.reply('charge.done');
  past.reply('ship.done');
  assert.equal(past.state.pivotPassed, true);
  const before = past.state;
  assert.match(past.act({ kind: 'compensate' }) ?? '', /past its pivot and forward-only/);
  assert.equal(past.state, before, 'a refusal changes nothing');
  assert.ok(!allowedActions(withPivot, past.state).includes('compensate'));

  const pivotOut = new Run(withPivot);
  pivotOut.reply('reserve.done');
  pivotOut.reply('charge.done');
  assert.match(pivotOut.act({ kind: 'compensate' }) ?? '', /pivot ship's command is out/);

  const early = new Run(withPivot);
  early.reply('reserve.done');
  assert.equal(early.act({ kind: 'compensate' }), null);
  assert.deepEqual(early.commands().slice(-1), ['charge/compensate#1 charge.undo'], 'the step in flight first');
  early.reply(REPLY.compensated);
  early.reply(REPLY.compensated);
  assert.equal(early.state.status, 'compensated');
});

test('operator: a deadline past the pivot is lifted by resume: the flow goes forward to the next step', () => {
  const run = new Run(withPivot);
  run.reply('reserve.done');
  run.reply('charge.done');
  run.reply('ship.done');
  run.deadline();
  assert.equal(run.state.attentionReason, 'deadline_after_pivot');
  assert.deepEqual(allowedActions(withPivot, run.state), ['resume', 'close']);
  assert.match(run.act({ kind: 'retry' }) ?? '', /needs a decision/);
  assert.equal(run.act({ kind: 'resume' }), null);
  assert.equal(run.state.deadlineAt, null);
  assert.equal(run.state.status, 'resolving', 'notify was out: the saga asks whether it applied');
  run.reply(REPLY.applied);
  assert.equal(run.state.status, 'completed');
});

test('operator: close ends any unfinished saga with nothing more sent; nothing is allowed on an ended saga', () => {
  const run = new Run(threeSteps);
  run.reply('reserve.done');
  const sent = run.sent.length;
  assert.equal(run.act({ kind: 'close' }), null);
  assert.equal(run.state.status, 'closed_manually');
  assert.equal(run.state.dueAt, null);
  assert.equal(run.sent.length, sent);
  assert.deepEqual(allowedActions(threeSteps, run.state), []);
  assert.match(run.act({ kind: 'retry' }) ?? '', /closed_manually: nothing more/);
  assert.equal(run.reply('charge.done').verdict, 'stale', 'a late reply does not reopen it');
});
