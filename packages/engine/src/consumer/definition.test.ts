import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../errors.ts';
import { defaultConsumerLimits, defineConsumer } from './definition.ts';

const handler = new URL('file:///srv/handlers/project.ts');

test('defineConsumer resolves defaults once: group id, strict first version, schema 1, limits', () => {
  const d = defineConsumer({ name: 'orders-projection', topics: ['orders.events'], handler });
  assert.equal(d.groupId, 'postbox.orders-projection');
  assert.equal(d.firstVersion, 'strict');
  assert.equal(d.handler, 'file:///srv/handlers/project.ts');
  assert.deepEqual(d.limits, defaultConsumerLimits);
  assert.equal(d.tenants, null, 'every tenant');
  assert.equal(defineConsumer({ name: 'a', topics: ['t'], handler: '/srv/h.ts' }).handler, 'file:///srv/h.ts');
});

test('defineConsumer refuses bad input loudly, naming the field and the fix', () => {
  const bad: Array<[object, RegExp]> = [
    [{ name: '9lives', topics: ['t'], handler }, /consumer name must start with a letter/],
    [{ name: 'a', topics: [], handler }, /topics must be a non-empty list/],
    [{ name: 'a', topics: ['t'], handler: './relative.ts' }, /handler must be an absolute path or a file: URL/],
    [{ name: 'a', topics: ['t'], handler, firstVersion: 'latest' }, /firstVersion must be 'strict'/],
    [
      { name: 'a', topics: ['t'], handler, schemaVersions: { OrderPlaced: [] } },
      /schemaVersions.OrderPlaced must be a non-empty list/,
    ],
    [{ name: 'a', topics: ['t'], handler, limits: { threads: 0 } }, /limits.threads must be an integer ≥ 1/],
    [{ name: 'a', topics: ['t'], handler, limits: { workerHeapMb: 16 } }, /limits.workerHeapMb must be at least 64/],
    [
      { name: 'a', topics: ['t'], handler, limits: { maxBatchEvents: 5000 } },
      /must not exceed limits.maxInFlightEvents/,
    ],
    [
      { name: 'a', topics: ['t'], handler, limits: { maxInFlightBytes: 1024 } },
      /must be at least limits.maxEventBytes/,
    ],
    [{ name: 'a', topics: ['t'], handler, tenants: [] }, /tenants must be a non-empty list .* leave it out/],
    [{ name: 'a', topics: ['t'], handler, tenants: ['acme', ''] }, /tenants must be a non-empty list/],
  ];
  for (const [input, message] of bad) {
    assert.throws(
      () => defineConsumer(input as never),
      (e: unknown) => e instanceof ConfigError && message.test(e.message),
      JSON.stringify(input),
    );
  }
});
