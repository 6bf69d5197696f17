import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { extensionsOf, RESERVED_ATTRIBUTES } from './extensions.ts';

test('extensionsOf: the headers that are not attributes Postbox knows; undefined when there is none', () => {
  const attributes = { id: 'e-1', type: 'OrderPlaced', subject: 'o-1', traceparent: 't', datacontenttype: 'a/b' };
  assert.equal(extensionsOf(attributes), undefined);
  assert.deepEqual(extensionsOf({ ...attributes, tenant: 'acme', region: 'eu' }), { tenant: 'acme', region: 'eu' });
});

test('extensionsOf: an extension named __proto__ is an own property, never the prototype', () => {
  const found = extensionsOf(JSON.parse('{"id":"e-1","__proto__":"x"}') as Record<string, string>)!;
  assert.equal(Object.getPrototypeOf(found), Object.prototype);
  assert.equal(Object.getOwnPropertyDescriptor(found, '__proto__')?.value, 'x');
});

test('extensionsOf keeps exactly the non-reserved headers, in their order', () => {
  const name = fc.oneof(fc.constantFrom(...RESERVED_ATTRIBUTES), fc.stringMatching(/^[a-z0-9]{1,20}$/));
  fc.assert(
    fc.property(fc.dictionary(name, fc.string(), { noNullPrototype: true }), (headers) => {
      const expected = Object.entries(headers).filter(([n]) => !RESERVED_ATTRIBUTES.has(n));
      const found = extensionsOf(headers);
      if (expected.length === 0) assert.equal(found, undefined);
      else assert.deepEqual(Object.entries(found!), expected);
    }),
  );
});
