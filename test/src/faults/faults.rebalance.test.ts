import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { alive, faultDuration, Pipeline, recordScenario, stopGracefully } from '../support/pipeline.ts';
import { createPrivateTopic, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import type { RoleProcess } from '../support/processes.ts';
import { stack as shared } from '../support/stack.ts';

// A rebalance storm (POSTBOX_FAULT_STORM_MS: 10 s in `npm test`, 45 s in `npm run test:faults`) under load: every 1.5–4 s a consumer joins or one
// leaves gracefully (SIGTERM: it finishes its batches, commits its offsets, exits 0), between one and four
// members of the group at any time, so partitions move while batches are in flight. A private broker (its short
// group.min.session.timeout lets the group settle in seconds); the verifier has the last word.
const STORM_MS = faultDuration('POSTBOX_FAULT_STORM_MS', 10_000);
const MIN_LEAVES = 3;
const READY = 'postbox consume:';

let db: TestDatabase;
let kafka: PrivateStack;
let pipeline: Pipeline | null = null;
const topic = uniqueTopic('storm');
const consumer = `st${topic.slice(-6)}`;

before(async () => {
  [db, kafka] = await Promise.all([freshDatabase(), startPrivateStack({ kafka: {} })]);
  await createPrivateTopic(kafka, topic, 6);
});

after(async () => {
  await pipeline?.stopAll();
  await kafka?.stop();
  await db?.drop();
});

test(`rebalance storm for ${STORM_MS / 1000} s (consumers joining and leaving every few seconds) under load: nothing lost, doubled or reordered`, {
  timeout: STORM_MS + 420_000,
}, async () => {
  const p = (pipeline = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: kafka.urls.KAFKA_BROKERS!,
    redisUrl: shared.REDIS_URL,
    topic,
    partitions: 6,
    consumer,
    env: { POSTBOX_KAFKA_SESSION_TIMEOUT_MS: '3000', POSTBOX_KAFKA_HEARTBEAT_MS: '500' },
  }));
  await p.setup(2);
  const writer = p.writer({ WRITER_RATE: '40', WRITER_AGGREGATES: '120', WRITER_FLAKY: '0.03' });
  p.relay();
  const members: RoleProcess[] = [p.consumer()];
  let joins = 1;
  let leaves = 0;
  const started = Date.now();
  const until = started + STORM_MS;
  // The storm lasts its time and has at least three graceful leaves (the dice gave two in 25 s once): a leave is
  // at least an even chance at each step, and certain at four members, so this ends within a few steps.
  while (Date.now() < until || leaves < MIN_LEAVES) {
    await sleep(1500 + Math.random() * 2500);
    for (const m of members)
      assert.ok(alive(m), `a consumer died by itself (exit ${m.child.exitCode}):\n${m.output().slice(-3000)}`);
    const join = members.length === 1 || (members.length < 4 && Math.random() < 0.5);
    if (join) {
      members.push(p.consumer());
      joins++;
    } else {
      const [leaving] = members.splice(Math.floor(Math.random() * members.length), 1);
      await stopGracefully(leaving!, 'a leaving consumer', READY);
      leaves++;
    }
  }
  const stormSeconds = Math.round((Date.now() - started) / 1000);
  await stopGracefully(writer, 'writer', 'writer started');
  const report = await p.settle(240_000);
  const c = report.consumers[0]!;
  assert.equal(c.lost.count, 0);
  assert.equal(c.appliedTwice!.count, 0);
  assert.equal(c.outOfOrder.count, 0);
  assert.ok(c.events > 500, `load ran through the storm (${c.events} events)`);
  console.log(`# rebalance storm: ${joins} joins, ${leaves} graceful leaves in ${stormSeconds} s; ${c.events} events`);
  recordScenario({ scenario: 'rebalance-storm', iterations: joins + leaves, report });
});
