import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { fromKafkaHeaders, toKafkaHeaders } from './headers.ts';

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

test('toKafkaHeaders: CloudEvents attributes as ce_ headers, the content type as content-type, trace context plain', () => {
  assert.deepEqual(
    toKafkaHeaders({
      id: 'e-1',
      aggregateversion: '3',
      sagaid: 's-1',
      datacontenttype: 'application/json',
      traceparent: TRACEPARENT,
      tracestate: 'a=b',
    }),
    {
      ce_id: 'e-1',
      ce_aggregateversion: '3',
      ce_sagaid: 's-1',
      'content-type': 'application/json',
      traceparent: TRACEPARENT,
      tracestate: 'a=b',
    },
  );
});

test('fromKafkaHeaders: the first value of each, Buffers decoded; headers outside the binding left out', () => {
  assert.deepEqual(
    fromKafkaHeaders({
      ce_id: Buffer.from('e-1'),
      ce_type: [Buffer.from('OrderPlaced'), Buffer.from('Other')],
      'content-type': 'application/json',
      traceparent: TRACEPARENT,
      'x-other': 'no',
      ce_: 'empty name',
      ce_subject: undefined,
    }),
    { id: 'e-1', type: 'OrderPlaced', datacontenttype: 'application/json', traceparent: TRACEPARENT },
  );
  assert.deepEqual(fromKafkaHeaders(undefined), {});
});

test('fromKafkaHeaders: a ce___proto__ header is an own property, never the prototype', () => {
  const read = fromKafkaHeaders(JSON.parse('{"ce___proto__":"x"}') as Record<string, string>);
  assert.equal(Object.getPrototypeOf(read), Object.prototype);
  assert.equal(Object.getOwnPropertyDescriptor(read, '__proto__')?.value, 'x');
});

test('neutral headers survive the Kafka binding both ways', () => {
  const name = fc.stringMatching(/^[a-z0-9]{1,20}$/);
  fc.assert(
    fc.property(fc.dictionary(name, fc.string(), { noNullPrototype: true }), (headers) => {
      assert.deepEqual(fromKafkaHeaders(toKafkaHeaders(headers)), headers);
    }),
  );
});
