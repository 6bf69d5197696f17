import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { SagaFacts } from '../../records/observation.ts';
import { defaultCheckOptions } from '../options.ts';
import { checkSagas } from './sagas.ts';

const AT = 10_000_000;
type Cmd = SagaFacts['commands'][number];
const cmd = (step: string, direction: string, attempt = 1, createdAt = AT - 5000): Cmd => ({
  sagaId: 's1',
  step,
  direction,
  attempt,
  createdAt,
});

/** A compensated saga: reserve and charge sent, charge refused, reserve undone (5 transitions, 3 commands). */
function compensated(): SagaFacts {
  return {
    instances: [
      {
        sagaId: 's1',
        type: 'order',
        status: 'compensated',
        version: 4,
        steps: ['compensated', 'failed'],
        sends: [2, 1],
        dueAt: null,
        attentionReason: null,
      },
    ],
    history: [1, 2, 3, 4].map((version) => ({ sagaId: 's1', version, to: 'running', at: AT - 9000 + version })),
    commands: [cmd('reserve', 'forward'), cmd('charge', 'forward'), cmd('reserve', 'compensate')],
  };
}

const run = (f: SagaFacts, final = false) => checkSagas(f, { at: AT }, { ...defaultCheckOptions, final });
const invariants = (f: SagaFacts, final = false) => run(f, final).violations.map((v) => v.invariant);

test('verify sagas: a compensated saga with one line per version and its commands counted holds', () => {
  const checked = run(compensated(), true);
  assert.deepEqual(checked.violations, []);
  assert.deepEqual(checked.report.byStatus, { compensated: 1 });
});

test('verify sagas: a missing or repeated version, or commands the saga did not count, break its history', () => {
  const repeated = compensated();
  repeated.history[3] = { ...repeated.history[3]!, version: 3 };
  assert.deepEqual(invariants(repeated), ['saga-history']);
  const extra = compensated();
  extra.commands.push(cmd('charge', 'query'));
  assert.ok(invariants(extra).includes('saga-history'));
});

test('verify sagas: a forward command sent twice, and compensation not last first, are violations', () => {
  const twice = compensated();
  twice.commands.splice(1, 0, cmd('reserve', 'forward'));
  twice.instances[0]!.sends = [3, 1];
  assert.deepEqual(invariants(twice), ['saga-command-twice']);
  const order = compensated();
  order.commands = [
    cmd('reserve', 'forward'),
    cmd('charge', 'forward'),
    cmd('reserve', 'compensate'),
    cmd('charge', 'compensate'),
  ];
  order.instances[0]!.sends = [2, 2];
  assert.deepEqual(invariants(order), ['saga-compensation-order']);
  const never = compensated();
  never.commands = [cmd('reserve', 'forward'), cmd('ship', 'compensate')];
  never.instances[0]!.sends = [1, 0, 1];
  assert.match(run(never).violations[0]!.message, /compensation of ship, which was never sent forward/);
});

test('verify sagas: a command written while the saga was frozen is a violation; one after the operator acted is not', () => {
  const f = compensated();
  f.instances[0]!.status = 'needs_attention';
  f.instances[0]!.version = 5;
  f.history.push({ sagaId: 's1', version: 5, to: 'needs_attention', at: AT - 3000 });
  f.commands.push(cmd('reserve', 'compensate', 2, AT - 2000));
  f.instances[0]!.sends = [3, 1];
  assert.deepEqual(invariants(f), ['saga-command-after-attention']);
  f.history.push({ sagaId: 's1', version: 6, to: 'compensating', at: AT - 2000 });
  f.instances[0]!.version = 6;
  f.instances[0]!.status = 'compensating';
  f.instances[0]!.dueAt = AT + 1000;
  assert.deepEqual(invariants(f), [], 'sent by the operator’s own transition');
});

test('verify sagas: a live saga with no timer, or a timer long overdue, is stuck; a final check wants it ended or frozen', () => {
  const f = compensated();
  f.instances[0]!.status = 'running';
  f.instances[0]!.dueAt = AT + 5000;
  assert.deepEqual(invariants(f), []);
  assert.deepEqual(invariants(f, true), ['saga-unsettled']);
  f.instances[0]!.dueAt = null;
  assert.deepEqual(invariants(f), ['saga-stuck']);
  f.instances[0]!.dueAt = AT - defaultCheckOptions.stuckAfterMs - 1000;
  assert.deepEqual(invariants(f), ['saga-stuck']);
  f.instances[0]!.status = 'needs_attention';
  assert.deepEqual(invariants(f, true), [], 'frozen for an operator is a settled state');
});
