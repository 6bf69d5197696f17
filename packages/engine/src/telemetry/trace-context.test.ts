import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  creationLink,
  formatTraceparent,
  parseTraceparent,
  sanitizeTraceFields,
  toTraceFields,
} from './trace-context.ts';

const TP = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

test('a version-00 traceparent parses to a remote span context and formats back unchanged', () => {
  const context = parseTraceparent(TP, 'vendor=abc');
  assert.ok(context);
  assert.equal(context.traceId, '0af7651916cd43dd8448eb211c80319c');
  assert.equal(context.spanId, 'b7ad6b7169203331');
  assert.equal(context.traceFlags, 1);
  assert.equal(context.isRemote, true);
  assert.equal(context.traceState?.get('vendor'), 'abc');
  assert.equal(formatTraceparent(context), TP);
  assert.deepEqual(toTraceFields(context), { traceparent: TP, tracestate: 'vendor=abc' });
});

test('malformed or all-zero trace context is rejected, never thrown over', () => {
  for (const bad of [
    '',
    'x',
    '01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    '00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01',
    '00-00000000000000000000000000000000-b7ad6b7169203331-01',
    '00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01',
    `${TP}-extra`,
  ]) {
    assert.equal(parseTraceparent(bad), null, bad);
    assert.equal(creationLink(bad, null), null, bad);
  }
});

test('sanitizeTraceFields keeps valid input, drops a bad traceparent with its tracestate, and says so', () => {
  assert.deepEqual(sanitizeTraceFields(TP, 'a=b'), { traceparent: TP, tracestate: 'a=b', dropped: false });
  assert.deepEqual(sanitizeTraceFields(TP, undefined), { traceparent: TP, dropped: false });
  assert.deepEqual(sanitizeTraceFields('garbage', 'a=b'), { dropped: true });
  assert.deepEqual(sanitizeTraceFields(TP, 'a=\u0001'), { traceparent: TP, dropped: true });
  assert.deepEqual(sanitizeTraceFields(TP, 'x'.repeat(513)), { traceparent: TP, dropped: true });
  assert.deepEqual(sanitizeTraceFields(undefined, 'a=b'), { dropped: true });
  assert.deepEqual(sanitizeTraceFields(undefined, undefined), { dropped: false });
});
