import { test } from 'node:test';
import assert from 'node:assert/strict';
import { REDACTED, scrubPayload } from './redact.ts';

test('scrubPayload takes every quoted data value out of an error text', () => {
  const data = {
    card: 'CANARY-4242',
    nested: { note: 'say "hi"\\there', amount: 123456 },
    list: ['alpha-value'],
    ok: 'ok',
  };
  const text = `handler failed for ${JSON.stringify(data)}: CANARY-4242 / amount 123456 / alpha-value`;
  const out = scrubPayload(text, data);
  for (const secret of ['CANARY-4242', '123456', 'alpha-value', 'say \\"hi\\"\\\\there'])
    assert.ok(!out.includes(secret), `${secret} in ${out}`);
  assert.ok(out.includes(REDACTED));
  assert.ok(out.includes('"ok":"ok"'), 'values under 4 characters stay');
});

test('a value containing another is removed whole; no data leaves the text as it is', () => {
  assert.equal(scrubPayload('x abcdefgh y', { a: 'abcd', b: 'abcdefgh' }), `x ${REDACTED} y`);
  assert.equal(scrubPayload('nothing here', undefined), 'nothing here');
  assert.equal(scrubPayload('nothing here', { a: 'elsewhere' }), 'nothing here');
});
