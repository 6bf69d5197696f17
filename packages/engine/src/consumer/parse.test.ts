import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defineConsumer } from './definition.ts';
import { parseRecord } from './parse.ts';
import type { InboundRecord } from '../ports/subscriber.ts';

const definition = defineConsumer({
  name: 'p',
  topics: ['t'],
  handler: 'file:///h.ts',
  schemaVersions: { V2Event: [1, 2] },
  limits: { maxEventBytes: 1000, maxInFlightBytes: 100_000 },
});
const id = '01900000-0000-7000-8000-000000000001';

function record(change: (r: InboundRecord) => void = () => {}): InboundRecord {
  const r: InboundRecord = {
    topic: 't',
    partition: 0,
    offset: '7',
    key: 'a-1',
    value: Buffer.from('{"n":1}'),
    headers: {
      ce_id: id,
      ce_type: 'V2Event',
      ce_source: 'test',
      ce_subject: 'a-1',
      ce_time: '2026-01-01T00:00:00.000Z',
      ce_aggregateversion: '3',
      ce_schemaversion: '2',
    },
  };
  change(r);
  return r;
}

test('parseRecord reads a CloudEvents binary-mode record into a validated envelope', () => {
  const parsed = parseRecord(record(), definition);
  assert.ok(parsed.ok);
  assert.deepEqual(parsed.envelope, {
    event_id: id,
    event_type: 'V2Event',
    schema_version: 2,
    aggregate_id: 'a-1',
    aggregate_version: 3,
    occurred_at: '2026-01-01T00:00:00.000Z',
    producer: 'test',
    data: { n: 1 },
  });
});

test('parseRecord names each kind of poison, keeping what identity it could read', () => {
  const cases: Array<[(r: InboundRecord) => void, string]> = [
    [(r) => (r.value = Buffer.alloc(1001, 0x20)), 'event_too_large'],
    [(r) => (r.value = Buffer.from([0xc3, 0x28])), 'not_utf8'],
    [(r) => (r.value = Buffer.from('nope')), 'not_json'],
    [(r) => (r.value = null), 'not_json'],
    [(r) => (r.headers.ce_aggregateversion = '0'), 'envelope_invalid'],
    [(r) => (r.key = 'a-2'), 'key_mismatch'],
    [(r) => (r.headers.ce_schemaversion = '3'), 'unknown_schema_version'],
    [(r) => (r.headers.ce_type = 'Other'), 'unknown_schema_version'],
  ];
  for (const [change, code] of cases) {
    const parsed = parseRecord(record(change), definition);
    assert.ok(!parsed.ok, code);
    assert.equal(parsed.code, code);
    assert.equal(parsed.eventId, id);
    assert.equal(parsed.aggregateId, 'a-1');
  }
});
