import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { fingerprint, type FingerprintInput } from './fingerprint.ts';
import { extensionsOf } from './extensions.ts';

/**
 * The fingerprint as first defined (and stored in message_inbox since): SHA-256 of each part fed on its own,
 * each followed by a NUL — key, type, schema version, subject, aggregate version, then each extension's name and
 * value in name order — then the value bytes; 16 bytes kept. A faster computation must give the same digest, or
 * every redelivery of an event already in an inbox would read as a conflict.
 */
function reference(record: FingerprintInput): Buffer {
  const h = record.headers;
  const hash = createHash('sha256');
  for (const part of [
    record.key ?? '\u0000',
    h.type ?? '',
    h.schemaversion ?? '',
    h.subject ?? '',
    h.aggregateversion ?? '',
  ]) {
    hash.update(part);
    hash.update('\u0000');
  }
  const extensions = extensionsOf(h);
  if (extensions)
    for (const name of Object.keys(extensions).sort()) hash.update(`${name}\u0000${extensions[name]}\u0000`);
  if (record.value) hash.update(record.value);
  return hash.digest().subarray(0, 16);
}

const text = fc.string({ unit: 'grapheme', maxLength: 20 });
const record: fc.Arbitrary<FingerprintInput> = fc.record({
  key: fc.option(text, { nil: null }),
  value: fc.option(fc.uint8Array({ maxLength: 64 }), { nil: null }),
  headers: fc
    .tuple(
      fc.record(
        {
          id: fc.uuid(),
          type: text,
          schemaversion: fc.nat().map(String),
          subject: text,
          aggregateversion: fc.nat().map(String),
        },
        { requiredKeys: [] },
      ),
      fc.dictionary(fc.stringMatching(/^[a-z0-9]{1,8}$/), text, { maxKeys: 4 }),
    )
    .map(([attributes, extensions]) => ({ ...extensions, ...attributes })),
});

test('property: the fingerprint is the digest of its parts as first defined (stored fingerprints still match)', () => {
  fc.assert(
    fc.property(record, (r) => assert.deepEqual(fingerprint(r), reference(r))),
    { numRuns: 2000 },
  );
});

test('a fixed record keeps its fingerprint', () => {
  const r = {
    key: 'order-1',
    value: Buffer.from('{"amount":10}'),
    headers: { type: 'OrderPaid', schemaversion: '1', subject: 'order-1', aggregateversion: '2', sagaid: 's-1' },
  };
  // As computed before this test existed (and by the definition above).
  assert.equal(fingerprint(r).toString('hex'), 'd473dbf38a9e6cf3c461e0f55e2dfcfb');
  assert.equal(reference(r).toString('hex'), 'd473dbf38a9e6cf3c461e0f55e2dfcfb');
  assert.equal(fingerprint(r).length, 16);
});
