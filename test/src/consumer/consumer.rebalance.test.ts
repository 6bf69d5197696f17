import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { stack } from '../support/stack.ts';
import { appliedSequences, ceRecord, createHandlerTables, produce, TEST_CONSUMER_MODULE } from '../support/consumer.ts';

let db: TestDatabase;
const topic = uniqueTopic('rebalance');
const AGGREGATES = 150;
const VERSIONS = 16;

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
    LOG_LEVEL: 'warn',
    TEST_LIMITS: JSON.stringify({ maxBatchEvents: 20 }),
  };
  const start = () => spawnPostbox(['consume', TEST_CONSUMER_MODULE], env);
  const processes: RoleProcess[] = [];
  const producing = (async () => {
    for (let v = 1; v <= VERSIONS; v++) {
      await produce(
        topic,
        Array.from({ length: AGGREGATES }, (_, a) => ceRecord({ aggregate_id: `r-${a}`, version: v })),
      );
      await sleep(600);
    }
  })();
  const stop = async (p: RoleProcess) => {
    // A process still loading its modules has no SIGTERM handler yet (the signal would kill it, exit null): a
    // member that just joined is stopped once it says it runs.
    await waitFor('the consumer to run', async () => p.output().includes('postbox consume:') || undefined, 60_000, 100);
    p.kill('SIGTERM');
    assert.equal(await p.exited, 0, p.output());
  };
  try {
    processes.push(start());
    await sleep(2000);
    processes.push(start());
    await sleep(2000);
    processes.push(start());
    await sleep(3000);
    await stop(processes[0]!); // leaves while B and C run
    await sleep(2000);
    processes.push(start()); // a fourth joins
    await sleep(2000);
    await stop(processes[1]!);
    await producing;
    await waitFor(
      'every event applied',
      async () => {
        const { n } = (
          await db.sql<{ n: number }[]>`SELECT count(DISTINCT (aggregate_id, version))::int AS n FROM test_applied`
        )[0]!;
        return n === AGGREGATES * VERSIONS;
      },
      45_000,
    );
  } finally {
    await Promise.all(processes.filter((p) => p.child.exitCode === null && p.child.signalCode === null).map(stop));
  }
  const sequences = await appliedSequences(db.sql, 'rebalance');
  assert.equal(sequences.size, AGGREGATES);
  const expected = Array.from({ length: VERSIONS }, (_, i) => i + 1);
  for (const [aggregate, versions] of sequences)
    assert.deepEqual(versions, expected, `${aggregate}: complete, once each, in order`);
  const { parked } = (await db.sql<{ parked: number }[]>`SELECT count(*)::int AS parked FROM message_parked`)[0]!;
  assert.equal(parked, 0);
  const stats = processes.map(
    (p) =>
      JSON.parse(
        p
          .output()
          .split('\n')
          .find((l) => l.includes('"consumer-stats"'))!,
      )['consumer-stats'],
  );
  assert.ok(
    stats.filter((s) => s.applied + s.drained > 0).length >= 3,
    `work was shared: ${stats.map((s) => s.applied).join(', ')}`,
  );
});
