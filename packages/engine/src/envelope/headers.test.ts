import { test } from 'node:test';
import assert from 'node:assert/strict';
import { neutralHeaders } from './headers.ts';

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

test('neutralHeaders reads headers stored with the Kafka binding names as neutral ones, foreign headers left out', () => {
  assert.deepEqual(
    neutralHeaders({
      ce_id: 'e-1',
      ce_aggregateversion: '3',
      ce_sagaid: 's-1',
      'content-type': 'application/json',
      traceparent: TRACEPARENT,
      'x-other': 'no',
      ce_: 'empty name',
    }),
    { id: 'e-1', aggregateversion: '3', sagaid: 's-1', datacontenttype: 'application/json', traceparent: TRACEPARENT },
  );
});

test('neutralHeaders leaves neutral headers as they are, in a copy', () => {
  const neutral = { id: 'e-1', type: 'OrderPlaced', datacontenttype: 'application/json', traceparent: TRACEPARENT };
  const read = neutralHeaders(neutral);
  assert.deepEqual(read, neutral);
  assert.notEqual(read, neutral);
});

test('neutralHeaders: a stored ce___proto__ header is an own property, never the prototype', () => {
  const read = neutralHeaders(JSON.parse('{"ce_id":"e-1","ce___proto__":"x"}') as Record<string, string>);
  assert.equal(Object.getPrototypeOf(read), Object.prototype);
  assert.equal(Object.getOwnPropertyDescriptor(read, '__proto__')?.value, 'x');
});
