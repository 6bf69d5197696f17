import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ENVELOPE_DATETIME, envelopeSchemaAccepts } from './envelope.ts';
import { keepsEnvelopeRules } from './envelope-rules.ts';
import { RESERVED_ATTRIBUTES } from './extensions.ts';

// The fast check must give zod's verdict on every candidate: validateEnvelope returns what the fast check accepts
// without asking zod, so a candidate it accepts and zod refuses would be an invalid envelope let through.

const reserved = [...RESERVED_ATTRIBUTES];
const noControl = (max: number, min = 0) =>
  fc.string({ unit: 'grapheme', minLength: min, maxLength: max }).filter((v) => !/[\u0000-\u001f\u007f]/.test(v));
const name = fc.stringMatching(/^[A-Za-z][A-Za-z0-9._:/-]{0,40}$/);
const iso = fc
  .date({ min: new Date('0001-01-01'), max: new Date('9999-12-31'), noInvalidDate: true })
  .map((d) => d.toISOString());
const extensionName = fc.stringMatching(/^[a-z0-9]{1,20}$/).filter((n) => !RESERVED_ATTRIBUTES.has(n));

/** Envelopes that keep every rule (the optional fields sometimes there). */
const validEnvelope = fc.record(
  {
    event_id: fc.uuid({ version: 7 }),
    event_type: name,
    schema_version: fc.integer({ min: 1, max: 32767 }),
    aggregate_id: noControl(40, 1),
    aggregate_version: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
    occurred_at: iso,
    producer: name,
    traceparent: fc.stringMatching(/^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/),
    tracestate: noControl(60),
    deadline: iso,
    extensions: fc.dictionary(extensionName, noControl(40), { maxKeys: 20 }),
    data: fc.jsonValue(),
  },
  {
    requiredKeys: [
      'event_id',
      'event_type',
      'schema_version',
      'aggregate_id',
      'aggregate_version',
      'occurred_at',
      'producer',
      'data',
    ],
  },
);

const anything = fc.oneof(fc.anything(), fc.constantFrom(undefined, null, '', 0, -1, 1.5, NaN, Infinity, true, [], {}));
const long = (unit: string, n: number) => unit.repeat(n);

/** One field set to a value at or across a rule's edge (or removed, or an unknown field added). */
const mutation: fc.Arbitrary<[string, unknown]> = fc.oneof(
  fc.tuple(fc.constantFrom('event_id', 'event_type', 'schema_version', 'aggregate_id', 'aggregate_version'), anything),
  fc.tuple(
    fc.constantFrom('occurred_at', 'producer', 'traceparent', 'tracestate', 'deadline', 'extensions', 'data'),
    anything,
  ),
  fc.tuple(
    fc.constant('event_id'),
    fc.oneof(
      fc.uuid(),
      fc.uuid({ version: 7 }).map((u) => u.toUpperCase()),
      fc.constant('0190a8b2-1c3d-7e4f-8a9b-0c1d2e3f4a5'),
    ),
  ),
  fc.tuple(
    fc.constantFrom('event_type', 'producer'),
    fc.oneof(
      fc.constantFrom(long('a', 200), long('a', 201), '1abc', 'a b', 'é', 'a\u0000', ''),
      fc.string({ maxLength: 8 }),
    ),
  ),
  fc.tuple(
    fc.constantFrom('schema_version', 'aggregate_version'),
    fc.oneof(
      fc.constantFrom(0, 1, 32767, 32768, Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER + 2, 2.5, -0, '1'),
      fc.double(),
      fc.integer(),
    ),
  ),
  fc.tuple(
    fc.constantFrom('aggregate_id', 'tracestate'),
    fc.oneof(
      fc.constantFrom(long('a', 200), long('a', 201), long('a', 512), long('a', 513), '', 'x\ny', 'x\u007f', '\ud800'),
      fc.string({ maxLength: 8 }),
    ),
  ),
  fc.tuple(
    fc.constantFrom('occurred_at', 'deadline'),
    fc.constantFrom(
      '2026-12-07T07:00:00+01:00',
      '2026-12-07T07:00:00.123456789-11:30',
      '2026-12-07T07:00Z',
      '2026-12-07 07:00:00Z',
      '2026-02-29T00:00:00Z',
      '2024-02-29T00:00:00Z',
      '2026-12-07T07:00:00',
      '2026-12-07T24:00:00Z',
      '+012026-12-07T07:00:00Z',
    ),
  ),
  fc.tuple(
    fc.constant('traceparent'),
    fc.constantFrom(
      '00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01',
      '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1',
      '',
    ),
  ),
  fc.tuple(
    fc.constant('extensions'),
    fc.oneof(
      fc.dictionary(
        fc.oneof(extensionName, fc.constantFrom(...reserved), fc.string({ maxLength: 22 })),
        fc.oneof(noControl(10), anything),
        {
          maxKeys: 4,
        },
      ),
      fc
        .integer({ min: 19, max: 22 })
        .map((n) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`e${i}`, 'v']))),
      fc
        .constantFrom(
          long('v', 1024),
          long('v', 1025),
          long('é', 512),
          long('é', 513),
          long('\u20ac', 341),
          long('\u20ac', 342),
          'x\u0000',
        )
        .map((v) => ({ tenant: v })),
      fc.constantFrom(['a'], new Map([['a', 'b']]), Object.create(null) as object),
    ),
  ),
  fc.tuple(fc.constantFrom('unknown_field', '__proto__x', 'Event_id'), anything),
  fc.tuple(
    fc.constant('delete'),
    fc.constantFrom('event_id', 'event_type', 'producer', 'data', 'occurred_at', 'traceparent'),
  ),
);

const candidate = fc.tuple(validEnvelope, fc.array(mutation, { maxLength: 2 })).map(([base, mutations]) => {
  const c: Record<string, unknown> = { ...base };
  for (const [field, value] of mutations) {
    if (field === 'delete') delete c[value as string];
    else c[field] = value;
  }
  return c;
});

test('the fast envelope check and the zod schema agree on every candidate', () => {
  let accepted = 0;
  let runs = 0;
  fc.assert(
    fc.property(candidate, (c) => {
      const zod = envelopeSchemaAccepts(c);
      runs++;
      if (zod) accepted++;
      assert.equal(keepsEnvelopeRules(c, ENVELOPE_DATETIME), zod, JSON.stringify(c));
    }),
    { numRuns: 20_000 },
  );
  // Both verdicts well represented: agreement on refusals alone would prove nothing.
  assert.ok(accepted > runs * 0.2 && accepted < runs * 0.8, `zod accepted ${accepted} of ${runs}`);
});

test('the fast check agrees with zod on candidates that are not plain envelopes', () => {
  for (const c of [null, undefined, 1, 'x', [], [1], new Date(), Object.create({ event_id: 'x' })]) {
    assert.equal(keepsEnvelopeRules(c, ENVELOPE_DATETIME), envelopeSchemaAccepts(c), String(c));
  }
});
