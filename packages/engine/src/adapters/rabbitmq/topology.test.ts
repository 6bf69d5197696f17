import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { queueName } from './topology.ts';

// Topic and group names allowed on RabbitMQ (letters, digits, _, -, .): the dots that topics and groups carry.
const name = fc.stringMatching(/^[A-Za-z0-9_.-]{1,12}$/);

test('queueName: two different (topic, group, partition) never share a queue, dots in names or not', () => {
  assert.notEqual(queueName('a.b', 'c', 0), queueName('a', 'b.c', 0));
  fc.assert(
    fc.property(name, name, fc.nat(64), name, name, fc.nat(64), (t1, g1, p1, t2, g2, p2) => {
      const same = t1 === t2 && g1 === g2 && p1 === p2;
      assert.equal(queueName(t1, g1, p1) === queueName(t2, g2, p2), same);
    }),
  );
});
