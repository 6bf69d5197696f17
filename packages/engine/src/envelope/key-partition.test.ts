import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { murmur2, partitionForKey } from './key-partition.ts';

// Values of Kafka's Java Utils.murmur2 (the client's own unit test, kafka/clients UtilsTest.testMurmur2).
const JAVA = [
  ['21', -973932308],
  ['foobar', -790332482],
  ['a-little-bit-long-string', -985981536],
  ['a-little-bit-longer-string', -1486304829],
  ['lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8', -58897971],
  ['abc', 479470107],
] as const;

test('murmur2 gives the Java client’s values', () => {
  for (const [key, hash] of JAVA) assert.equal(murmur2(Buffer.from(key)), hash, key);
});

test('partitionForKey agrees with kafkajs’s DefaultPartitioner for any key and partition count', async () => {
  // The reference partitioner is kafkajs's own (the engine's Kafka adapter sends with it).
  const { Partitioners } = await import('kafkajs');
  const kafkajs = Partitioners.DefaultPartitioner();
  fc.assert(
    fc.property(fc.string({ unit: 'grapheme', maxLength: 60 }), fc.integer({ min: 1, max: 256 }), (key, n) => {
      const partitionMetadata = Array.from({ length: n }, (_, i) => ({
        partitionId: i,
        leader: 0,
        partitionErrorCode: 0,
        replicas: [0],
        isr: [0],
      }));
      assert.equal(partitionForKey(key, n), kafkajs({ topic: 't', partitionMetadata, message: { key, value: null } }));
    }),
    { numRuns: 2000 },
  );
});

test('partitionForKey refuses a partition count that is not a positive integer', () => {
  for (const n of [0, -1, 1.5, Number.NaN]) assert.throws(() => partitionForKey('a', n), RangeError);
});
