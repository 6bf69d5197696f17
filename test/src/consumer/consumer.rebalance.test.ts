import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { consumerStats, holdsPartitions, spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { stack } from '../support/stack.ts';
import { appliedSequences, ceRecord, createHandlerTables, produce, TEST_CONSUMER_MODULE } from '../support/consumer.ts';

let db: TestDatabase;
const topic = uniqueTopic('rebalance');
const AGGREGATES = 150;
/** Versions produced at the least, and at the most (a bound, should the membership steps never settle). */
const MIN_VERSIONS = 12;
const MAX_VERSIONS = 120;

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 6);
  // A little work per event, so partitions move while batches are in flight.
  await createHandlerTables(db.sql, 2);
});

after(async () => {
  await db.drop();
});

test('three consumer processes joining and leaving under load: every aggregate applied 1..n, complete, once, in order', async () => {
  const env = {
    DATABASE_URL: db.url,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
    TEST_TOPIC: topic,
    TEST_CONSUMER: 'rebalance',
    // info: each member's 'consumer assignment' lines drive the steps below (a loaded machine joins slowly).
    LOG_LEVEL: 'info',
    TEST_LIMITS: JSON.stringify({ maxBatchEvents: 20 }),
  };
  const start = () => spawnPostbox(['consume', TEST_CONSUMER_MODULE], env);
  const processes: RoleProcess[] = [];
  let membershipDone = false;
  let versions = 0;
  // Events keep coming while members join and leave, and for a few versions after the last change.
  const producing = (async () => {
    let tail = 0;
    while (versions < MAX_VERSIONS && (versions < MIN_VERSIONS || !membershipDone || tail < 3)) {
      versions++;
      if (membershipDone) tail++;
      await produce(
        topic,
        Array.from({ length: AGGREGATES }, (_, a) => ceRecord({ aggregate_id: `r-${a}`, version: versions })),
      );
      await sleep(600);
    }
  })();
  const join = async () => {
    const p = start();
    processes.push(p);
    await waitFor(`member ${processes.length} to be assigned partitions`, async () => holdsPartitions(p), 90_000, 100);
    await sleep(1500); // it works its partitions for a while
    return p;
  };
  const stop = async (p: RoleProcess) => {
    // A process still loading its modules has no SIGTERM handler yet (the signal would kill it, exit null): a
    // member that just joined is stopped once it says it runs.
    await waitFor('the consumer to run', async () => p.output().includes('postbox consume:') || undefined, 60_000, 100);
    p.kill('SIGTERM');
    assert.equal(await p.exited, 0, p.output());
  };
  try {
    const a = await join();
    const b = await join();
    await join();
    await stop(a); // leaves while B and C run
    await join(); // a fourth joins
    await stop(b);
    membershipDone = true;
    await producing;
    await waitFor(
      'every event applied',
      async () => {
        const { n } = (
          await db.sql<{ n: number }[]>`SELECT count(DISTINCT (aggregate_id, version))::int AS n FROM test_applied`
        )[0]!;
        return n === AGGREGATES * versions;
      },
      60_000,
    );
  } finally {
    membershipDone = true;
    await producing;
    await Promise.all(processes.filter((p) => p.child.exitCode === null && p.child.signalCode === null).map(stop));
  }
  assert.ok(versions < MAX_VERSIONS, 'the membership steps finished while events were produced');
  const sequences = await appliedSequences(db.sql, 'rebalance');
  assert.equal(sequences.size, AGGREGATES);
  const expected = Array.from({ length: versions }, (_, i) => i + 1);
  for (const [aggregate, versions] of sequences)
    assert.deepEqual(versions, expected, `${aggregate}: complete, once each, in order`);
  const { parked } = (await db.sql<{ parked: number }[]>`SELECT count(*)::int AS parked FROM message_parked`)[0]!;
  assert.equal(parked, 0);
  const stats = processes.map(consumerStats);
  assert.ok(
    stats.filter((s) => s.applied + s.drained > 0).length >= 3,
    `work was shared (applied+drained): ${stats.map((s) => s.applied + s.drained).join(', ')}`,
  );
});
