import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { fromNatsHeaders, toNatsHeaders } from './headers.ts';

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

test('toNatsHeaders: CloudEvents attributes as ce- headers, the content type too (ce-datacontenttype), trace context plain', () => {
  const h = toNatsHeaders({ id: 'e-1', datacontenttype: 'application/json', sagaid: 's-1', traceparent: TRACEPARENT });
  assert.deepEqual(
    [...h].map(([k, v]) => [k, v[0]]),
    [
      ['ce-id', 'e-1'],
      ['ce-datacontenttype', 'application/json'],
      ['ce-sagaid', 's-1'],
      ['traceparent', TRACEPARENT],
    ],
  );
});

test("fromNatsHeaders: JetStream's own headers and others outside the binding left out; names read case-blind", () => {
  const h = natsHeaders();
  h.set('Nats-Msg-Id', 'e-1');
  h.set('CE-ID', 'e-1');
  h.set('ce-type', 'OrderPlaced');
  h.set('Content-Type', 'application/json');
  h.set('tracestate', 'a=b');
  assert.deepEqual(fromNatsHeaders(h), { id: 'e-1', type: 'OrderPlaced', tracestate: 'a=b' });
  assert.deepEqual(fromNatsHeaders(undefined), {});
});

test('attribute values are percent-encoded on the wire (space, quote, percent, beyond ASCII) and read back as they were', () => {
  const h = toNatsHeaders({ sagaid: ' 50% "off" für ✓ ' });
  assert.equal(h.get('ce-sagaid'), '%2050%25%20%22off%22%20f%C3%BCr%20%E2%9C%93%20');
  assert.deepEqual(fromNatsHeaders(h), { sagaid: ' 50% "off" für ✓ ' });
});

test('neutral headers survive the NATS binding both ways, whatever the values', () => {
  const name = fc.stringMatching(/^[a-z0-9]{1,20}$/);
  fc.assert(
    fc.property(fc.dictionary(name, fc.string({ unit: 'grapheme' }), { noNullPrototype: true }), (headers) => {
      assert.deepEqual(fromNatsHeaders(toNatsHeaders(headers)), headers);
    }),
  );
});
