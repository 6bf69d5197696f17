import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { enqueueMany, type EventInput } from '@postbox/engine';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { faultIterations, Pipeline, recordScenario, stopGracefully } from '../support/pipeline.ts';
import { createPrivateTopic, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { waitFor } from '../support/processes.ts';
import { stack as shared } from '../support/stack.ts';
import { failpointLoop, type FailpointLoopResult } from './support/failpoint-loop.ts';

// kill -9 at every crash boundary of docs/design.md §12, ITERATIONS times each, with load running: the writer at
// outbox.after-commit, the relay at relay.after-publish-before-mark, consumers at
// consumer.after-commit-before-offset and retry.after-ledger-before-enqueue (the four loops run at once, each
// restarting its process as soon as it died), then operator replays at replay.mid-batch. The broker is private
// (its short group.min.session.timeout lets a restarted consumer rejoin in seconds); PostgreSQL and Redis are the
// shared stack's (nothing here stops them). Ends with the verifier's final check.
// 3 kills per failpoint in `npm test` (the suite must stay under 30 minutes with the saga, reconciliation and
// broker conformance cases in it); `npm run test:faults` runs its --iterations (default 20).
const ITERATIONS = faultIterations(2);
const STUCK = Math.max(12, ITERATIONS * 3);
const PARTITIONS = 4;

let db: TestDatabase;
let kafka: PrivateStack;
let pipeline: Pipeline | null = null;
const topic = uniqueTopic('fp');
const consumer = `fp${topic.slice(-6)}`;

before(async () => {
  [db, kafka] = await Promise.all([freshDatabase(), startPrivateStack({ kafka: {} })]);
  await createPrivateTopic(kafka, topic, PARTITIONS);
});

after(async () => {
  await pipeline?.stopAll();
  await kafka?.stop();
  await db?.drop();
});

test(`kill -9 at every failpoint, ${ITERATIONS} times each, under load: nothing lost, nothing applied twice, order kept`, {
  timeout: 300_000 + ITERATIONS * 45_000,
}, async () => {
  const p = (pipeline = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: kafka.urls.KAFKA_BROKERS!,
    redisUrl: shared.REDIS_URL,
    topic,
    partitions: PARTITIONS,
    consumer,
    env: { POSTBOX_KAFKA_SESSION_TIMEOUT_MS: '3000', POSTBOX_KAFKA_HEARTBEAT_MS: '500' },
  }));
  await p.setup();
  // Aggregates whose handler fails until the test "fixes" it: after the retry budget (2 attempts) they are in the
  // failure store with their v2 parked, ready for the replays at the end.
  const stuck = Array.from({ length: STUCK }, (_, i) => `${consumer}-stuck-${i}`);
  await p.sql`UPDATE test_handler_control SET fail_aggregates = ${stuck}`;
  const events: EventInput[] = stuck.flatMap((a) =>
    [1, 2].map((v) => ({ event_type: 'FaultEvent', aggregate_id: a, aggregate_version: v, data: { v } })),
  );
  await p.sql.begin((tx) => enqueueMany(tx, events, { topic, producer: 'fault-test' }));

  const writer = { WRITER_RATE: '40', WRITER_AGGREGATES: '150', WRITER_FLAKY: '0.05' };
  const deadline = Date.now() + 120_000 + ITERATIONS * 30_000;
  // Steady members keep the chain flowing while the armed ones die and restart.
  p.writer({ ...writer, WRITER_RATE: '15' });
  p.relay();
  p.consumer();
  const loops = await Promise.all([
    failpointLoop({
      name: 'outbox.after-commit',
      maxPass: 25,
      iterations: ITERATIONS,
      deadline,
      spawn: (env) => p.writer({ ...writer, ...env }),
    }),
    failpointLoop({
      name: 'relay.after-publish-before-mark',
      maxPass: 4,
      iterations: ITERATIONS,
      deadline,
      spawn: (env) => p.relay(env),
    }),
    failpointLoop({
      name: 'consumer.after-commit-before-offset',
      maxPass: 6,
      iterations: ITERATIONS,
      deadline,
      spawn: (env) => p.consumer(env),
    }),
    failpointLoop({
      name: 'retry.after-ledger-before-enqueue',
      maxPass: 2,
      iterations: ITERATIONS,
      deadline,
      spawn: (env) => p.consumer(env),
    }),
  ]);

  await waitFor(
    'every stuck aggregate in the failure store',
    async () => {
      const [r] = await p.sql<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM message_failure WHERE consumer_name = ${consumer} AND status = 'open'`;
      return r!.n >= STUCK;
    },
    120_000,
    1000,
  );
  await p.sql`UPDATE test_handler_control SET fail_aggregates = '{}'`;
  // Replays die after scheduling n − 1 failures and writing the n-th's ledger row without its job: the next
  // replay takes the rest, reconciliation enqueues the orphan.
  const replays = await failpointLoop({
    name: 'replay.mid-batch',
    maxPass: 3,
    iterations: ITERATIONS,
    deadline: Date.now() + ITERATIONS * 30_000,
    spawn: (env) => p.replay(env, ['--limit', '10']),
  });
  const rest = p.replay();
  assert.equal(await rest.exited, 0, rest.output());

  await stopWriters(p);
  const report = await p.settle(240_000);
  const c = report.consumers[0]!;
  printLoops([...loops, replays]);
  assert.equal(c.lost.count, 0);
  assert.equal(c.appliedTwice!.count, 0);
  assert.equal(c.outOfOrder.count, 0);
  assert.ok(
    report.log.duplicates > 0,
    'relays killed after the broker confirmed re-sent those batches (the counted duplicate window)',
  );
  assert.ok(
    c.duplicatesAbsorbed > 0,
    'consumers killed before their offset commit got redeliveries, absorbed by the inbox',
  );
  const [replayed] = await p.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_failure WHERE consumer_name = ${consumer} AND status = 'replayed'`;
  assert.equal(replayed!.n, STUCK, 'every failure was replayed once (audited), none twice');
  const [audits] = await p.sql<
    { n: number }[]
  >`SELECT count(DISTINCT target)::int AS n FROM operator_audit WHERE action = 'failure.replay'`;
  assert.equal(audits!.n, STUCK);
  recordScenario({ scenario: 'failpoints', iterations: [...loops, replays].reduce((s, l) => s + l.kills, 0), report });
});

async function stopWriters(p: Pipeline): Promise<void> {
  for (const w of [...p.processes]) {
    if (w.child.spawnargs.some((a) => a.endsWith('writer.ts'))) await stopGracefully(w, 'writer', 'writer started');
  }
}

function printLoops(loops: FailpointLoopResult[]): void {
  for (const l of loops)
    console.log(
      `# ${l.name}: ${l.kills} kills at the failpoint (${l.misses} runs missed it), mean run ${l.meanRunMs} ms`,
    );
}
