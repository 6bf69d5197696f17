import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { defineConsumer } from './definition.ts';
import { parseRecord } from './parse.ts';
import { RESERVED_ATTRIBUTES } from '../envelope/extensions.ts';
import { fingerprint } from '../envelope/fingerprint.ts';
import type { InboundRecord } from '../ports/subscriber.ts';
import { toRecord } from '../relay/record.ts';

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
      id: id,
      type: 'V2Event',
      source: 'test',
      subject: 'a-1',
      time: '2026-01-01T00:00:00.000Z',
      aggregateversion: '3',
      schemaversion: '2',
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
    [(r) => (r.headers.aggregateversion = '0'), 'envelope_invalid'],
    [(r) => (r.key = 'a-2'), 'key_mismatch'],
    [(r) => (r.headers.schemaversion = '3'), 'unknown_schema_version'],
    [(r) => (r.headers.type = 'Other'), 'unknown_schema_version'],
  ];
  for (const [change, code] of cases) {
    const parsed = parseRecord(record(change), definition);
    assert.ok(!parsed.ok, code);
    assert.equal(parsed.code, code);
    assert.equal(parsed.eventId, id);
    assert.equal(parsed.aggregateId, 'a-1');
  }
});

test('parseRecord puts headers that are no known attribute into envelope.extensions, and leaves it out when there is none', () => {
  const parsed = parseRecord(
    record((r) => Object.assign(r.headers, { sagaid: 's-1', direction: 'compensate' })),
    definition,
  );
  assert.ok(parsed.ok);
  assert.deepEqual(parsed.envelope.extensions, { sagaid: 's-1', direction: 'compensate' });
  const plain = parseRecord(record(), definition);
  assert.ok(plain.ok);
  assert.ok(!('extensions' in plain.envelope));
});

test('parseRecord never takes a known attribute for an extension', () => {
  // Values parse would accept where it reads them (deadline); every other known one is ignored or overridden.
  const known = Object.fromEntries([...RESERVED_ATTRIBUTES].map((name) => [name, '2030-01-01T00:00:00Z']));
  const parsed = parseRecord(
    record((r) => (r.headers = { ...known, ...r.headers, sagaid: 's-1' })),
    definition,
  );
  assert.ok(parsed.ok, JSON.stringify(parsed));
  assert.deepEqual(parsed.envelope.extensions, { sagaid: 's-1' });
});

test('parseRecord holds extensions to the enqueue rules: a bad one is envelope_invalid, naming it', () => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ SagaId: 'x' }, /extensions\.SagaId: must be 1–20 lowercase letters or digits/],
    [{ sagaid: 'x'.repeat(1025) }, /extensions\.sagaid: must be at most 1024 bytes/],
    [Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`ext${i}`, 'v'])), /extensions: must have at most 20/],
  ];
  for (const [headers, rule] of cases) {
    const parsed = parseRecord(
      record((r) => Object.assign(r.headers, headers)),
      definition,
    );
    assert.ok(!parsed.ok);
    assert.equal(parsed.code, 'envelope_invalid');
    assert.match(parsed.detail, rule);
    assert.equal(parsed.eventId, id);
  }
});

const extensionName = fc
  .stringMatching(/^[a-z0-9]{1,20}$/)
  .filter((n) => !RESERVED_ATTRIBUTES.has(n) && n !== '__proto__');
const extensionValue = fc.string({ maxLength: 64 }).filter((v) => !/[\u0000-\u001f\u007f]/.test(v));

test('property: extensions round-trip outbox row → toRecord → parseRecord unchanged', () => {
  fc.assert(
    fc.property(fc.dictionary(extensionName, extensionValue, { maxKeys: 20 }), (extensions) => {
      const message = toRecord({
        event_id: id,
        event_type: 'V2Event',
        schema_version: 2,
        aggregate_id: 'a-1',
        aggregate_version: '3',
        topic: 't',
        payload: Buffer.from('{"n":1}'),
        producer: 'test',
        occurred_at: new Date('2026-01-01T00:00:00.000Z'),
        traceparent: null,
        tracestate: null,
        deadline: null,
        extensions,
        attempts: 1,
      });
      const parsed = parseRecord({ ...message, partition: 0, offset: '1' }, definition);
      assert.ok(parsed.ok, JSON.stringify(parsed));
      assert.deepEqual(parsed.envelope.extensions, Object.keys(extensions).length > 0 ? { ...extensions } : undefined);
    }),
  );
});

test('the fingerprint covers extensions: another value differs, header order does not, none keeps the old digest', () => {
  const base = record();
  const withExt = (headers: Record<string, string>) =>
    fingerprint({ ...base, headers: { ...base.headers, ...headers } });
  const a = withExt({ sagaid: 's-1', replyto: 'r' });
  assert.deepEqual(withExt({ replyto: 'r', sagaid: 's-1' }), a);
  assert.notDeepEqual(withExt({ sagaid: 's-2', replyto: 'r' }), a);
  assert.notDeepEqual(withExt({ sagaid: 's-1' }), a);
  assert.notDeepEqual(fingerprint(base), a);
  // Headers that are not extensions (trace context, a known attribute Postbox does not read) leave it alone.
  assert.deepEqual(
    withExt({ traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' }),
    fingerprint(base),
  );
  assert.deepEqual(withExt({ dataschema: 'x' }), fingerprint(base));
  // The digest of an event without extensions, as the inbox stored it before extensions existed.
  assert.equal(fingerprint(base).toString('hex'), '4e4cff1c1bec7a845815c1e0aa533a31');
});

test('a consumer naming its tenants takes their events only: another tenant, or none, is tenant_refused', () => {
  const acme = { ...definition, tenants: ['acme', 'initech'] };
  const withTenant = (tenant: string) => record((r) => (r.headers.tenant = tenant));
  const taken = parseRecord(withTenant('initech'), acme);
  assert.ok(taken.ok);
  assert.equal(taken.envelope.extensions?.tenant, 'initech');
  for (const [r, detail] of [
    [withTenant('globex'), /tenant "globex" is not one this consumer takes \("acme", "initech"\)/],
    [record(), /names no tenant/],
  ] as const) {
    const refused = parseRecord(r, acme);
    assert.ok(!refused.ok);
    assert.equal(refused.code, 'tenant_refused');
    assert.match(refused.detail, detail);
    assert.equal(refused.eventId, id, 'the refusal keeps the identity for the failure row');
  }
  // A consumer that names none takes every tenant, and events without one.
  assert.ok(parseRecord(withTenant('globex'), definition).ok);
  fc.assert(
    fc.property(
      fc.string({ minLength: 1, maxLength: 30 }).filter((t) => !/[\u0000-\u001f\u007f]/.test(t)),
      (t) => {
        const parsed = parseRecord(withTenant(t), acme);
        return parsed.ok === (t === 'acme' || t === 'initech');
      },
    ),
  );
});
