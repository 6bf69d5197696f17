import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { PayloadKeyError } from '../errors.ts';
import { generatePayloadKey, parsePayloadKeys } from './payload-keys.ts';
import { openFailure, openRecord, sealFailure, sealRecord } from './row-seal.ts';
import { seal, unseal } from './sealed.ts';

const k1 = generatePayloadKey('k1');
const k2 = generatePayloadKey('k2');
const ring1 = parsePayloadKeys(k1)!;
const ring21 = parsePayloadKeys(`${k2},${k1}`)!;
const ring2 = parsePayloadKeys(k2)!;

const code = (c: string) => (e: unknown) => e instanceof PayloadKeyError && e.code === c;

test('seal then unseal gives the bytes back, under any key of the ring; the ciphertext never holds them', () => {
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 8, maxLength: 2048 }), fc.string(), (bytes, aad) => {
      const plain = Buffer.from(bytes);
      const sealed = seal(ring1, plain, aad);
      assert.equal(sealed.keyId, 'k1');
      assert.deepEqual(unseal(ring21, sealed, aad, 'row'), plain);
      assert.equal(sealed.bytes.indexOf(plain), -1);
    }),
  );
});

test('two seals of the same bytes differ (a fresh nonce each time)', () => {
  const a = seal(ring1, Buffer.from('same'), 'x');
  const b = seal(ring1, Buffer.from('same'), 'x');
  assert.notDeepEqual(a.bytes, b.bytes);
});

test('any altered byte, another row, another key id or another key: an error, never garbage', () => {
  fc.assert(
    fc.property(
      fc.uint8Array({ minLength: 1, maxLength: 256 }),
      fc.nat(),
      fc.integer({ min: 1, max: 255 }),
      (bytes, at, flip) => {
        const sealed = seal(ring1, Buffer.from(bytes), 'row-a');
        const altered = Buffer.from(sealed.bytes);
        const i = at % altered.length;
        altered[i] = altered[i]! ^ flip;
        assert.throws(() => unseal(ring1, { keyId: 'k1', bytes: altered }, 'row-a', 'row a'), PayloadKeyError);
      },
    ),
  );
  const sealed = seal(ring1, Buffer.from('{"card":"4111"}'), 'row-a');
  assert.throws(() => unseal(ring1, sealed, 'row-b', 'row b'), code('payload_sealed_invalid'));
  const sameBytesOtherKey = parsePayloadKeys(`k1:${Buffer.alloc(32, 7).toString('base64')}`);
  assert.throws(() => unseal(sameBytesOtherKey, sealed, 'row-a', 'row a'), /does not authenticate under key "k1"/);
});

test('a key missing from the ring, or no ring at all, names the key the row needs', () => {
  const sealed = seal(ring1, Buffer.from('x'), 'r');
  assert.throws(
    () => unseal(ring2, sealed, 'r', 'the failure 7'),
    (e: unknown) =>
      code('payload_key_missing')(e) &&
      /the failure 7 is encrypted with key "k1", which the key ring \(k2\) does not hold/.test((e as Error).message),
  );
  assert.throws(() => unseal(null, sealed, 'r', 'the failure 7'), /POSTBOX_PAYLOAD_KEYS is not set/);
});

test('a failure row and a ledger record round-trip; their seal is bound to the row (event id case aside)', () => {
  const identity = {
    consumer_name: 'c',
    event_id: '0190A000-0000-7000-8000-000000000001',
    topic: 't',
    broker_partition: 3,
    broker_offset: '42',
  };
  const content = {
    payload: Buffer.from([0, 255, 1]),
    headers: { id: 'x', traceparent: 'tp' },
    envelope: { data: { n: 1 } },
  };
  const s = sealFailure(ring1, identity, content);
  const row = {
    ...identity,
    event_id: identity.event_id.toLowerCase(),
    key_id: s.keyId,
    sealed: s.bytes,
    payload: null,
    headers: null,
    envelope: null,
  };
  assert.deepEqual(openFailure(ring1, row), content);
  assert.throws(() => openFailure(ring1, { ...row, broker_offset: '43' }), code('payload_sealed_invalid'));
  const clear = { ...identity, key_id: null, sealed: null, ...content };
  assert.deepEqual(openFailure(null, clear), content);

  const record = { topic: 't', partition: 1, offset: '9', key: 'a', value: 'AAE=', headers: { id: 'e' } };
  const r = sealRecord(ring1, 'c', 'E1', record);
  assert.deepEqual(
    openRecord(ring21, { consumer_name: 'c', event_id: 'e1', record: null, key_id: r.keyId, sealed: r.bytes }),
    record,
  );
  assert.throws(
    () => openRecord(ring21, { consumer_name: 'd', event_id: 'e1', record: null, key_id: r.keyId, sealed: r.bytes }),
    PayloadKeyError,
  );
  assert.deepEqual(
    openRecord(null, { consumer_name: 'c', event_id: 'e1', record, key_id: null, sealed: null }),
    record,
  );
});
