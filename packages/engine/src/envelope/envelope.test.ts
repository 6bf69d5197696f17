import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { EnvelopeTooLargeError, EnvelopeValidationError } from '../errors.ts';
import { encodeData, validateEnvelope, type Envelope } from './envelope.ts';
import { newEventId } from './event-id.ts';
import { RESERVED_ATTRIBUTES } from './extensions.ts';

const valid = (): Envelope => ({
  event_id: newEventId(),
  event_type: 'OrderPaid',
  schema_version: 1,
  aggregate_id: 'order-1',
  aggregate_version: 2,
  occurred_at: new Date().toISOString(),
  producer: 'orders-service',
  traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
  data: { amount: 10 },
});

function issuesOf(candidate: unknown): Array<{ path: string; rule: string }> {
  try {
    validateEnvelope(candidate);
  } catch (error) {
    assert.ok(error instanceof EnvelopeValidationError);
    assert.equal(error.code, 'envelope_invalid');
    assert.equal(error.kind, 'permanent');
    return error.issues;
  }
  assert.fail('expected a validation error');
}

test('a valid envelope passes unchanged', () => {
  const e = valid();
  assert.deepEqual(validateEnvelope(e), e);
});

test('each invalid field is named with its rule', () => {
  const cases: Array<[keyof Envelope, unknown, RegExp]> = [
    ['event_id', 'not-a-uuid', /UUIDv7/],
    ['event_id', '0af76519-16cd-43dd-8448-eb211c80319c', /UUIDv7/], // a v4
    ['event_type', '', /empty/],
    ['event_type', '9lives', /start with a letter/],
    ['schema_version', 0, /at least 1/],
    ['schema_version', 1.5, /integer/],
    ['aggregate_id', 'a\u0000b', /control characters/],
    ['aggregate_id', 'x'.repeat(201), /at most 200/],
    ['aggregate_version', 0, /at least 1/],
    ['aggregate_version', '3', /number/],
    ['occurred_at', 'yesterday', /ISO-8601/],
    ['producer', '', /empty/],
    ['traceparent', '00-zz-01', /W3C traceparent/],
    ['data', undefined, /required/],
  ];
  for (const [field, value, rule] of cases) {
    const issues = issuesOf({ ...valid(), [field]: value });
    const where = `${field}=${JSON.stringify(value)}: ${JSON.stringify(issues)}`;
    assert.ok(issues.length >= 1 && issues.every((i) => i.path === field), where);
    assert.ok(
      issues.some((i) => rule.test(i.rule)),
      where,
    );
  }
});

test('unknown fields are refused and several problems are all reported', () => {
  const issues = issuesOf({ ...valid(), aggregate_version: -1, extra: true });
  assert.deepEqual(issues.map((i) => i.path).sort(), ['', 'aggregate_version']);
  assert.match(issues.find((i) => i.path === '')!.rule, /unknown field\(s\): extra/);
});

test('the error message names field and rule', () => {
  assert.throws(() => validateEnvelope({ ...valid(), aggregate_version: 0 }), /aggregate_version: must be at least 1/);
});

const saga = { sagaid: 'order-7', sagastep: '2', direction: 'forward', idempotencykey: 'k-1', replyto: 'orders' };

test('extensions: CloudEvents-named string attributes pass unchanged, up to 20 of them and 1 KiB each', () => {
  for (const extensions of [
    saga,
    {},
    { a: '', z9: 'ü'.repeat(512), ['x'.repeat(20)]: 'v' },
    Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`ext${i}`, 'v'])),
  ]) {
    const e = { ...valid(), extensions };
    assert.deepEqual(validateEnvelope(e), e);
  }
});

test('extensions: each bad name, value and count is named with its rule', () => {
  const cases: Array<[unknown, string, RegExp]> = [
    [{ SagaId: 'x' }, 'extensions.SagaId', /1–20 lowercase letters or digits/],
    [{ saga_id: 'x' }, 'extensions.saga_id', /1–20 lowercase letters or digits/],
    [{ '': 'x' }, 'extensions.', /1–20 lowercase letters or digits/],
    [{ ['x'.repeat(21)]: 'x' }, `extensions.${'x'.repeat(21)}`, /1–20 lowercase letters or digits/],
    [{ id: 'x' }, 'extensions.id', /reserved: Postbox sets the id attribute itself/],
    [{ aggregateversion: '9' }, 'extensions.aggregateversion', /reserved/],
    [{ sagaid: 7 }, 'extensions.sagaid', /must be a string/],
    [{ sagaid: 'x'.repeat(1025) }, 'extensions.sagaid', /at most 1024 bytes/],
    [{ sagaid: 'é'.repeat(513) }, 'extensions.sagaid', /at most 1024 bytes/], // 1026 bytes in 513 characters
    [{ sagaid: 'a\nb' }, 'extensions.sagaid', /control characters/],
    [Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`ext${i}`, 'v'])), 'extensions', /at most 20 attributes/],
    ['sagaid=1', 'extensions', /object of string values/],
    [['x'], 'extensions', /object of string values/],
  ];
  for (const [extensions, path, rule] of cases) {
    const issues = issuesOf({ ...valid(), extensions });
    const where = `${JSON.stringify(extensions).slice(0, 80)}: ${JSON.stringify(issues)}`;
    assert.ok(
      issues.some((i) => i.path === path && rule.test(i.rule)),
      where,
    );
  }
});

test('extensions: every reserved attribute name is refused, and all problems are reported at once', () => {
  for (const name of RESERVED_ATTRIBUTES) {
    assert.throws(
      () => validateEnvelope({ ...valid(), extensions: { [name]: 'x' } }),
      new RegExp(`extensions\\.${name}: is reserved: Postbox sets the ${name} attribute itself`),
    );
  }
  const many = Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`ext${i}`, 'v']));
  const issues = issuesOf({ ...valid(), extensions: { ...many, Bad: 'x', sagaid: 1 } });
  assert.deepEqual(issues.map((i) => i.path).sort(), ['extensions', 'extensions.Bad', 'extensions.sagaid']);
});

test('property: extension names of 1–20 lowercase letters or digits validate unless reserved; any other never does', () => {
  const good = fc.stringMatching(/^[a-z0-9]{1,20}$/);
  fc.assert(
    fc.property(fc.oneof(good, fc.string({ maxLength: 25 })), fc.string({ maxLength: 50 }), (name, value) => {
      const ok = /^[a-z0-9]{1,20}$/.test(name) && !RESERVED_ATTRIBUTES.has(name) && name !== '__proto__';
      const clean = !/[\u0000-\u001f\u007f]/.test(value);
      const run = () => validateEnvelope({ ...valid(), extensions: { [name]: value } });
      if (ok && clean) assert.deepEqual(run().extensions, { [name]: value });
      else if (name !== '__proto__') assert.throws(run, EnvelopeValidationError);
    }),
  );
});

test('encodeData counts extensions toward the size limit', () => {
  const e = { ...valid(), data: 'x'.repeat(500) };
  const limit = encodeData(e).length + 128 + 200; // room for the attributes, not for 1 KiB more
  assert.ok(encodeData(e, limit));
  assert.throws(
    () => encodeData({ ...e, extensions: { sagaid: 'y'.repeat(1024) } }, limit),
    (err: unknown) => err instanceof EnvelopeTooLargeError && err.bytes > limit,
  );
});

test('encodeData serializes data once and enforces the size limit including attributes', () => {
  const e = valid();
  assert.equal(encodeData(e).toString('utf8'), '{"amount":10}');
  const big = { ...e, data: 'x'.repeat(2000) };
  assert.throws(
    () => encodeData(big, 1500),
    (err: unknown) => err instanceof EnvelopeTooLargeError && err.limit === 1500 && err.bytes > 2000,
  );
  assert.ok(encodeData(big, 4096).length > 2000);
});

test('encodeData refuses data that is not JSON', () => {
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  assert.throws(() => encodeData({ ...valid(), data: cyclic }), /data: must be JSON-serializable/);
  assert.throws(() => encodeData({ ...valid(), data: () => 1 }), /data: must be a JSON value/);
});

test('property: any JSON data round-trips through encodeData', () => {
  fc.assert(
    fc.property(fc.jsonValue(), (data) => {
      const bytes = encodeData({ ...valid(), data });
      assert.deepEqual(JSON.parse(bytes.toString('utf8')), JSON.parse(JSON.stringify(data)));
    }),
  );
});

test('property: valid envelopes with arbitrary ids and versions validate; non-positive versions never do', () => {
  fc.assert(
    fc.property(
      fc.string({ minLength: 1, maxLength: 200 }).filter((s) => !/[\u0000-\u001f\u007f]/.test(s)),
      fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
      fc.integer({ max: 0 }),
      (aggregateId, version, badVersion) => {
        validateEnvelope({ ...valid(), aggregate_id: aggregateId, aggregate_version: version });
        assert.throws(() => validateEnvelope({ ...valid(), aggregate_version: badVersion }), EnvelopeValidationError);
      },
    ),
  );
});

test('event ids are UUIDv7 and time-ordered', () => {
  const ids = Array.from({ length: 100 }, () => newEventId());
  for (const id of ids) assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7/);
  assert.deepEqual([...ids].sort(), ids);
});
