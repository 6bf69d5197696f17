import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import kafkajs from 'kafkajs';
import { hasErrorType } from './broker-health.ts';
import { leaderlessTopic, replicaHealth, type PartitionReplicas } from './replica-health.ts';

const RF3 = [1, 2, 3];
const part = (partitionId: number, leader: number, isr: number[], replicas = RF3): PartitionReplicas => ({
  partitionId,
  leader,
  replicas,
  isr,
});

test('replica health: every replica in sync and up → nothing counted, min ISR = replication factor', () => {
  const h = replicaHealth('t', [part(0, 1, RF3), part(1, 2, [2, 3, 1]), part(2, 3, [3, 1, 2])], 2);
  assert.deepEqual(
    { ...h },
    {
      topic: 't',
      partitions: 3,
      replicationFactor: 3,
      minInsyncReplicas: 2,
      underReplicated: 0,
      offline: 0,
      belowMinInsync: 0,
      minIsr: 3,
      error: null,
    },
  );
});

test('replica health: one node out of the ISR → under-replicated, min ISR 2, publishing still possible', () => {
  const h = replicaHealth('t', [part(0, 1, [1, 2]), part(1, 2, [2, 1]), part(2, 1, [1, 2])], 2);
  assert.deepEqual([h.underReplicated, h.offline, h.belowMinInsync, h.minIsr], [3, 0, 0, 2]);
});

test('replica health: a node that does not answer is not in sync even while the metadata still lists it', () => {
  // Two of three nodes down: the controller quorum is lost and the survivor's metadata still says ISR [1, 2].
  const h = replicaHealth('t', [part(0, 1, [1, 2]), part(1, 2, [2, 1])], 2, new Set([2, 3]));
  assert.deepEqual([h.underReplicated, h.offline, h.belowMinInsync, h.minIsr], [2, 1, 2, 0]);
});

test('replica health: no leader (-1) → offline; unknown min.insync.replicas → never flagged below it', () => {
  const h = replicaHealth('t', [part(0, -1, [1]), part(1, 2, [2])], null);
  assert.deepEqual([h.offline, h.underReplicated, h.belowMinInsync, h.minIsr], [1, 2, 0, 0]);
});

const node = fc.integer({ min: 1, max: 5 });
const partition = fc
  .tuple(fc.uniqueArray(node, { minLength: 1, maxLength: 5 }), fc.integer({ min: -1, max: 5 }), fc.array(node))
  .map(([replicas, leader, isr]): PartitionReplicas => ({ partitionId: 0, leader, replicas, isr }));

test('replica health (property): counts stay within the partitions; a partition is counted iff it is short', () => {
  fc.assert(
    fc.property(
      fc.array(partition, { maxLength: 20 }),
      fc.option(fc.integer({ min: 1, max: 5 }), { nil: null }),
      fc.uniqueArray(node),
      (partitions, minInsync, downList) => {
        const down = new Set(downList);
        const h = replicaHealth('t', partitions, minInsync, down);
        for (const n of [h.offline, h.underReplicated, h.belowMinInsync]) assert.ok(n >= 0 && n <= partitions.length);
        assert.ok(h.minIsr <= h.replicationFactor);
        // A model of the definitions, written separately: in sync = a replica, in the ISR, answering, led.
        const inSync = partitions.map((p) =>
          p.leader < 0 || down.has(p.leader)
            ? 0
            : new Set(p.isr.filter((id) => p.replicas.includes(id) && !down.has(id))).size,
        );
        assert.equal(h.offline, partitions.filter((p) => p.leader < 0 || down.has(p.leader)).length);
        assert.equal(h.underReplicated, partitions.filter((p, i) => inSync[i]! < new Set(p.replicas).size).length);
        assert.equal(h.belowMinInsync, minInsync === null ? 0 : inSync.filter((n) => n < minInsync).length);
        assert.equal(h.minIsr, partitions.length === 0 ? 0 : Math.min(...inSync));
        if (h.offline > 0) assert.equal(h.minIsr, 0);
      },
    ),
  );
});

// kafkajs's typings give its error constructors an Error; at run time they read the protocol error's fields.
const protocolError = (e: { type: string; code: number; retriable: boolean; message?: string }) =>
  new kafkajs.KafkaJSProtocolError(e as unknown as Error);

test('a partition without a leader (LEADER_NOT_AVAILABLE, after kafkajs retries) counts the topic offline', () => {
  const protocol = protocolError({
    type: 'LEADER_NOT_AVAILABLE',
    code: 5,
    retriable: true,
    message: 'There is no leader for this topic-partition as we are in the middle of a leadership election',
  });
  const exceeded = new kafkajs.KafkaJSNumberOfRetriesExceeded(protocol, { retryCount: 2, retryTime: 300 });
  assert.equal(hasErrorType(protocol, 'LEADER_NOT_AVAILABLE'), true);
  assert.equal(hasErrorType(exceeded, 'LEADER_NOT_AVAILABLE'), true);
  const other = protocolError({ type: 'UNKNOWN_TOPIC_OR_PARTITION', code: 3, retriable: true });
  assert.equal(hasErrorType(other, 'LEADER_NOT_AVAILABLE'), false);
  assert.equal(hasErrorType(new Error('x'), 'LEADER_NOT_AVAILABLE'), false);
  const h = leaderlessTopic('t', 3, 2);
  assert.deepEqual(
    {
      partitions: h.partitions,
      offline: h.offline,
      belowMinInsync: h.belowMinInsync,
      minIsr: h.minIsr,
      error: h.error,
    },
    { partitions: 3, offline: 1, belowMinInsync: 1, minIsr: 0, error: null },
  );
  assert.equal(leaderlessTopic('t', 0, null).partitions, 1, 'never fewer partitions than the one offline');
});
