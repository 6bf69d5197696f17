import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../errors.ts';
import { formatPayloadKeys, generatePayloadKey, parsePayloadKeys } from './payload-keys.ts';

const key = (byte: number) => Buffer.alloc(32, byte).toString('base64');

test('a ring: the first key encrypts, every key decrypts; unset or empty means no encryption', () => {
  const ring = parsePayloadKeys(`new:${key(2)}, old:${key(1)}`)!;
  assert.equal(ring.primary, 'new');
  assert.deepEqual([...ring.keys.keys()], ['new', 'old']);
  assert.deepEqual(ring.keys.get('old'), Buffer.alloc(32, 1));
  assert.equal(parsePayloadKeys(undefined), null);
  assert.equal(parsePayloadKeys('  '), null);
});

test('every defect is refused with its entry, never with the key bytes', () => {
  const cases: Array<[string, RegExp]> = [
    [`k1${key(1)}`, /entry 1: expected id:base64key/],
    [`k1:${key(1)},k1:${key(2)}`, /entry 2: key id "k1" appears twice/],
    [`k1:${Buffer.alloc(16).toString('base64')}`, /key "k1"\): the key is 16 bytes, AES-256 needs 32/],
    [`k1:${key(1)},bad id:${key(2)}`, /entry 2: key id "bad id" must be/],
    [`k1:not*base64`, /key "k1"\): the key is not base64/],
  ];
  for (const [spec, message] of cases) {
    assert.throws(
      () => parsePayloadKeys(spec),
      (e: unknown) => e instanceof ConfigError && message.test(e.message) && !e.message.includes(key(1)),
      spec,
    );
  }
});

test('a generated key parses, and a ring formats back to the spec it came from', () => {
  const a = generatePayloadKey('a');
  const b = generatePayloadKey('b');
  assert.notEqual(a.split(':')[1], b.split(':')[1]);
  const ring = parsePayloadKeys(`${a},${b}`)!;
  assert.equal(formatPayloadKeys(ring), `${a},${b}`);
  assert.throws(() => generatePayloadKey('no spaces'), ConfigError);
});
