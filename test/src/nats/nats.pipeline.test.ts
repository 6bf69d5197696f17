import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { enqueueMany, type EventInput } from '@postbox/engine';
import { appliedSequences, createHandlerTables, TEST_CONSUMER_MODULE } from '../support/consumer.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { consumerStats, holdsPartitions, spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';

// The pipeline on NATS JetStream (issue 22): outbox → `postbox relay` → partition streams → two `postbox consume`
// processes sharing the partitions by lease, one leaving midway. Every aggregate is applied 1..n, once, in order,
// and `postbox verify` (reading the streams and the groups' ack floors) says so.
const AGGREGATES = 60;
const VERSIONS = 6;
let stack: PrivateStack;
let db: TestDatabase;
const processes: RoleProcess[] = [];

before(async () => {
  [stack, db] = await Promise.all([startPrivateStack({ nats: true }), freshDatabase()]);
  await createHandlerTables(db.sql, 2);
});

after(async () => {
  for (const p of processes) if (p.child.exitCode === null && p.child.signalCode === null) p.kill('SIGKILL');
  await Promise.all(processes.map((p) => p.exited));
  await stack?.stop();
  await db?.drop();
});

async function enqueueVersions(topic: string, from: number, to: number): Promise<void> {
  const rows: EventInput[] = [];
  for (let v = from; v <= to; v++)
    for (let a = 0; a < AGGREGATES; a++)
      rows.push({ event_type: 'TestEvent', aggregate_id: `n-${a}`, aggregate_version: v, data: { v } });
  await db.sql.begin((tx) => enqueueMany(tx, rows, { topic }));
}

test('relay and two consumers on NATS: partitions shared by lease, one leaves, every aggregate applied 1..n once in order', async () => {
  const topic = uniqueTopic('natspipe');
  const env = {
    DATABASE_URL: db.url,
    POSTBOX_BROKER: 'nats',
    NATS_URL: stack.nats!.url,
    // No Kafka here: a role that still reached for it would never start.
    KAFKA_BROKERS: '127.0.0.1:1',
    POSTBOX_TOPICS: `${topic}:4`,
    TEST_TOPIC: topic,
    TEST_CONSUMER: 'natspipe',
    TEST_LIMITS: JSON.stringify({ maxBatchEvents: 20 }),
    LOG_LEVEL: 'info',
  };
  const relay = spawnPostbox(['relay'], { ...env, POSTBOX_RELAY_THREADS: '1' });
  processes.push(relay);
  await enqueueVersions(topic, 1, 2);
  const consume = () => {
    const p = spawnPostbox(['consume', TEST_CONSUMER_MODULE], env);
    processes.push(p);
    return p;
  };
  const stop = async (p: RoleProcess) => {
    p.kill('SIGTERM');
    assert.equal(await p.exited, 0, p.output().slice(-3000));
  };
  const a = consume();
  await waitFor('a to hold partitions', async () => holdsPartitions(a), 60_000, 100).catch((e: unknown) => {
    throw new Error(`${(e as Error).message}\n${a.output().slice(-3000)}\n${relay.output().slice(-2000)}`);
  });
  const b = consume();
  await waitFor('b to hold partitions', async () => holdsPartitions(b), 60_000, 100);
  await enqueueVersions(topic, 3, 4);
  await sleep(1500);
  await stop(a); // leaves while b runs: b takes its partitions over
  await enqueueVersions(topic, 5, VERSIONS);
  await waitFor(
    'every event applied',
    async () => {
      const [row] = await db.sql<{ n: number }[]>`
        SELECT count(DISTINCT (aggregate_id, version))::int AS n FROM test_applied WHERE consumer = 'natspipe'`;
      return row!.n === AGGREGATES * VERSIONS;
    },
    90_000,
  ).catch((e: unknown) => {
    throw new Error(`${(e as Error).message}\n${b.output().slice(-3000)}`);
  });
  await stop(b);
  await stop(relay);
  const sequences = await appliedSequences(db.sql, 'natspipe');
  assert.equal(sequences.size, AGGREGATES);
  const expected = Array.from({ length: VERSIONS }, (_, i) => i + 1);
  for (const [aggregate, versions] of sequences)
    assert.deepEqual(versions, expected, `${aggregate}: once each, in order`);
  const stats = [a, b].map(consumerStats);
  assert.ok(
    stats.every((s) => s.applied + s.drained > 0),
    `both members applied events: ${stats.map((s) => s.applied + s.drained).join(', ')}`,
  );
  const leases = await db.sql<{ owner: string | null }[]>`
    SELECT owner FROM consumer_partition_lease WHERE topic = ${topic}`;
  assert.deepEqual(
    leases.map((l) => l.owner),
    [null, null, null, null],
    'members that stop give their partitions back',
  );
  // The verifier reads the partition streams and each group's ack floor: all holds; an inbox row removed under
  // the committed position is an event lost.
  const verify = async () => {
    const p = spawnPostbox(['verify', '--consumer', 'natspipe', '--final', '--json'], env);
    const code = await p.exited;
    const json = p.output().slice(p.output().indexOf('{'));
    return { code, report: JSON.parse(json) as { ok: boolean; violations: Array<{ invariant: string }> } };
  };
  const clean = await verify();
  assert.equal(clean.code, 0, JSON.stringify(clean.report));
  assert.equal(clean.report.ok, true);
  await db.sql`
    DELETE FROM message_inbox WHERE consumer_name = 'natspipe'
      AND event_id = (SELECT event_id FROM message_inbox WHERE consumer_name = 'natspipe' LIMIT 1)`;
  const broken = await verify();
  assert.equal(broken.code, 1);
  assert.ok(
    broken.report.violations.some((v) => v.invariant === 'lost'),
    JSON.stringify(broken.report.violations),
  );
});
