import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { OutboxFact } from '../queries/reconcile-outbox.ts';
import type { SagaStepsFact } from '../queries/reconcile-sagas.ts';
import { judgeConsumerBehind } from './checks/consumer-behind.ts';
import { judgeOutboxMissing } from './checks/outbox-missing.ts';
import { judgeRetryJobs } from './checks/retry-job-missing.ts';
import { judgeSagaSteps } from './checks/saga-step-mismatch.ts';
import { defineParticipantRecords } from './source.ts';

// The checks' judging is pure: facts in, findings out. The query modules that gather the facts are exercised by
// the integration tests (test/src/reconcile).
const NOW = Date.parse('2026-01-01T12:00:00Z');
const ago = (ms: number) => new Date(NOW - ms);

function row(
  id: string,
  v: number,
  status: OutboxFact['status'],
  createdAgo: number,
  publishedAgo?: number,
): OutboxFact {
  return {
    aggregate_id: id,
    aggregate_version: v,
    event_id: `e-${id}-${v}`,
    status,
    topic: 't',
    created_at: ago(createdAgo),
    published_at: publishedAgo === undefined ? null : ago(publishedAgo),
    last_error: status === 'failed' ? 'too large' : null,
  };
}

test('outbox-missing: missing row, failed row, pending past the grace; a young pending row and version 0 are fine', () => {
  const findings = judgeOutboxMissing(
    {
      aggregateType: 'order',
      canReemit: true,
      versions: [
        { aggregateId: 'a', version: 2 },
        { aggregateId: 'b', version: 1 },
        { aggregateId: 'c', version: 3 },
        { aggregateId: 'd', version: 1 },
        { aggregateId: 'e', version: 1 },
        { aggregateId: 'f', version: 0 },
      ],
      rows: [
        row('b', 1, 'published', 90_000, 89_000),
        row('c', 3, 'failed', 5000),
        row('d', 1, 'pending', 120_000),
        row('e', 1, 'pending', 1000),
      ],
    },
    NOW,
    60_000,
  );
  assert.deepEqual(
    findings.map((f) => [f.key, f.kind, f.repairable]),
    [
      ['order:a@2', 'missing_row', true],
      ['order:c@3', 'failed', true],
      ['order:d@1', 'unpublished', false],
    ],
  );
  assert.deepEqual(findings[0]!.observed, { outbox: null });
  const noCommand = judgeOutboxMissing(
    { aggregateType: 'order', canReemit: false, versions: [{ aggregateId: 'a', version: 1 }], rows: [] },
    NOW,
    0,
  );
  assert.equal(noCommand[0]!.repairable, false, 'without a re-emit command a missing row is for an operator');
});

test('consumer-behind: never delivered, parked gap and blocked told apart; young or unpublished events are not judged', () => {
  const lag = (id: string, extra: object = {}) => ({
    consumer_name: 'view',
    aggregate_id: id,
    version: 3,
    last_version: 1,
    blocked_reason: null,
    blocked_version: null,
    blocked_event_id: null,
    first_parked: null,
    parked: 0,
    ...extra,
  });
  const findings = judgeConsumerBehind(
    {
      aggregateType: 'order',
      behind: [
        lag('a'),
        lag('b', { parked: 1, first_parked: 3 }),
        lag('c', { blocked_reason: 'failed', blocked_version: 2, blocked_event_id: 'e-c-2' }),
        lag('d'),
        lag('e'),
      ],
      rows: [
        row('a', 3, 'published', 200_000, 190_000),
        row('b', 3, 'published', 200_000, 190_000),
        row('c', 3, 'published', 200_000, 190_000),
        row('d', 3, 'published', 10_000, 5000),
        row('e', 3, 'pending', 200_000),
      ],
    },
    NOW,
    120_000,
  );
  assert.deepEqual(
    findings.map((f) => [f.key, f.kind, f.repairable]),
    [
      ['view:order:a@3', 'never_delivered', true],
      ['view:order:b@3', 'parked_gap', true],
      ['view:order:c@3', 'blocked', false],
    ],
  );
  assert.deepEqual(findings[1]!.observed, { applied: 1, publishedAgoMs: 190_000, parked: 1, firstParked: 3 });
});

test('retry-job-missing: a row without a live job is a finding, due or not yet due; one with its job is not', () => {
  const r = (id: string, dueIn: number) => ({
    consumer_name: 'c',
    event_id: id,
    aggregate_id: `agg-${id}`,
    aggregate_version: 1,
    attempt: 2,
    next_attempt_at: new Date(NOW + dueIn),
    updated_at: ago(120_000),
  });
  const findings = judgeRetryJobs(
    {
      rows: [r('x', -5000), r('y', 60_000), r('z', -1)],
      hasJob: new Map([
        ['c/x', false],
        ['c/y', false],
        ['c/z', true],
      ]),
    },
    NOW,
  );
  assert.deepEqual(
    findings.map((f) => [f.key, f.kind, f.observed.overdueMs]),
    [
      ['c/x', 'due_without_job', 5000],
      ['c/y', 'scheduled_without_job', 0],
    ],
  );
});

test('saga-step-mismatch: succeeded but never applied (compensable before the pivot), undone but applied, and agreement', () => {
  const saga = (id: string, over: Partial<SagaStepsFact>): SagaStepsFact => ({
    seq: 1,
    saga_id: id,
    saga_type: 'order',
    definition_version: 1,
    status: 'running',
    pivot_passed: false,
    direction: 'forward',
    updated_at: ago(120_000),
    steps: ['succeeded', 'running', 'pending'],
    names: ['reserve', 'charge', 'ship'],
    records: { reserve: 'applied' },
    ...over,
  });
  const findings = judgeSagaSteps(
    [
      saga('s1', {}),
      saga('s2', { records: {} }),
      saga('s3', { records: { reserve: 'fenced' }, pivot_passed: true }),
      saga('s4', {
        status: 'compensated',
        steps: ['compensated', 'failed', 'pending'],
        records: { reserve: 'applied' },
      }),
      saga('s5', { direction: 'compensate', status: 'compensating', records: { reserve: 'compensated' } }),
      saga('s6', { saga_type: 'other', records: {} }),
    ],
    [defineParticipantRecords({ sagaType: 'order', steps: ['reserve', 'charge', 'ship'] })],
    () => true,
  );
  assert.deepEqual(
    findings.map((f) => [f.key, f.kind, f.repairable]),
    [
      ['s2:reserve', 'succeeded_not_applied', true],
      ['s3:reserve', 'succeeded_not_applied', false],
      ['s4:reserve', 'compensated_but_applied', false],
    ],
  );
  assert.deepEqual(findings[0]!.observed, {
    saga: 'running',
    step: 'succeeded',
    participant: 'never seen',
    pivotPassed: false,
  });
});
