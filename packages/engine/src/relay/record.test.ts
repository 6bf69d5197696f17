import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ClaimedRow } from '../queries/outbox-claim.ts';
import { toRecord } from './record.ts';

const row = (extensions?: Record<string, string> | null): ClaimedRow => ({
  event_id: '01900000-0000-7000-8000-000000000001',
  event_type: 'ReserveStock',
  schema_version: 1,
  aggregate_id: 'order-7',
  aggregate_version: '3',
  topic: 't',
  payload: Buffer.from('{"sku":"a"}'),
  producer: 'orders',
  occurred_at: new Date('2026-01-01T00:00:00.000Z'),
  traceparent: null,
  tracestate: null,
  deadline: null,
  ...(extensions === undefined ? {} : { extensions }),
  attempts: 1,
});

const ATTRIBUTES = {
  specversion: '1.0',
  id: '01900000-0000-7000-8000-000000000001',
  type: 'ReserveStock',
  source: 'orders',
  subject: 'order-7',
  time: '2026-01-01T00:00:00.000Z',
  aggregateversion: '3',
  schemaversion: '1',
  datacontenttype: 'application/json',
};

test('toRecord sends each extension attribute as a header of its name beside the CloudEvents attributes', () => {
  const record = toRecord(row({ sagaid: 's-1', sagastep: '2', replyto: 'orders.replies' }));
  assert.deepEqual(record.headers, {
    ...ATTRIBUTES,
    sagaid: 's-1',
    sagastep: '2',
    replyto: 'orders.replies',
  });
  assert.equal(record.key, 'order-7');
  assert.equal(record.value.toString('utf8'), '{"sku":"a"}');
});

test('toRecord adds no header for a row without extensions (null, empty or absent)', () => {
  for (const extensions of [null, {}, undefined]) assert.deepEqual(toRecord(row(extensions)).headers, ATTRIBUTES);
});

test('an extension stored under a reserved name never replaces an attribute the relay sets', () => {
  const record = toRecord(row({ id: 'forged', subject: 'other', deadline: '2000-01-01T00:00:00Z', sagaid: 's' }));
  assert.deepEqual(record.headers, { ...ATTRIBUTES, sagaid: 's' });
});
