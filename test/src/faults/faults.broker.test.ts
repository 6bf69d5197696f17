import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import {
  alive,
  faultDuration,
  faultIterations,
  Pipeline,
  recordScenario,
  stopGracefully,
} from '../support/pipeline.ts';
import { startFaultBroker, type FaultBroker } from '../support/fault-broker.ts';
import { restart } from '../support/private-stack.ts';
import type { RoleProcess } from '../support/processes.ts';
import { stack as shared } from '../support/stack.ts';

// The broker itself fails mid-stream (a private one; the shared stack's broker is never touched; Kafka, or the
// broker of POSTBOX_FAULT_BROKER: `npm run test:faults -- --broker nats|rabbitmq`): SIGKILL and a restart, then SIGSTOP for POSTBOX_FAULT_PAUSE_MS (10 s in `npm test`, 30 s in `npm run test:faults`) and
// SIGCONT. The writer, relay and consumer are never restarted by the test: they must ride it out, back off without
// a tight loop, and resume.
const PAUSE_MS = faultDuration('POSTBOX_FAULT_PAUSE_MS', 10_000);
const KILLS = Math.max(1, Math.ceil(faultIterations(10) / 10));

let db: TestDatabase;
let broker: FaultBroker;
const pipelines: Pipeline[] = [];

before(async () => {
  [db, broker] = await Promise.all([freshDatabase(), startFaultBroker()]);
});

after(async () => {
  for (const p of pipelines) await p.stopAll();
  await broker?.stop();
  await db?.drop();
});

async function pipelineFor(name: string): Promise<{ p: Pipeline; roles: RoleProcess[] }> {
  const topic = uniqueTopic(name);
  const consumer = `${name}${topic.slice(-6)}`;
  await broker.createTopic(topic, 3, [`postbox.${consumer}`]);
  const p = new Pipeline({
    databaseUrl: db.url,
    broker,
    redisUrl: shared.REDIS_URL,
    topic,
    partitions: 3,
    consumer,
    env: { POSTBOX_KAFKA_SESSION_TIMEOUT_MS: '6000', POSTBOX_PARTITION_LEASE_MS: '6000' },
  });
  pipelines.push(p);
  await p.setup();
  const roles = [
    p.writer({ WRITER_RATE: '30', WRITER_AGGREGATES: '60', WRITER_FLAKY: '0.02' }),
    p.relay({ POSTBOX_RELAY_THREADS: '1' }),
    p.consumer(),
  ];
  return { p, roles };
}

function assertAlive(roles: RoleProcess[], when: string): void {
  for (const r of roles)
    assert.ok(alive(r), `${r.child.spawnargs.slice(2).join(' ')} died ${when}:\n${r.output().slice(-3000)}`);
}

async function maxAttempts(p: Pipeline): Promise<number> {
  const [r] = await p.sql<{ max: number | null }[]>`SELECT max(attempts)::int AS max FROM message_outbox`;
  return r!.max ?? 0;
}

test(`broker SIGKILL mid-stream, ${KILLS} times, restarted after 5 s: every role reconnects by itself, nothing lost`, {
  timeout: 480_000,
}, async () => {
  const { p, roles } = await pipelineFor('bkill');
  await sleep(8000);
  for (let i = 0; i < KILLS; i++) {
    await broker.server.signal('SIGKILL');
    await broker.server.waitForExit();
    await sleep(5000);
    await restart(broker.server);
    await sleep(8000);
    assertAlive(roles, `after broker kill ${i + 1}`);
  }
  await stopGracefully(roles[0]!, 'writer', 'writer started');
  const report = await p.settle(180_000);
  assertAlive(roles.slice(1), 'after the broker kills');
  recordScenario({ scenario: `${broker.kind}.sigkill`, iterations: KILLS, report });
});

test(`broker SIGSTOP for ${PAUSE_MS / 1000} s (requests hang, nothing answers), then SIGCONT: no tight loop, everything resumes`, {
  timeout: PAUSE_MS + 420_000,
}, async () => {
  const { p, roles } = await pipelineFor('bstop');
  await sleep(8000);
  const before = await maxAttempts(p);
  await broker.server.signal('SIGSTOP');
  try {
    await sleep(PAUSE_MS);
    const during = await maxAttempts(p);
    // Backoff from 500 ms doubling to the 2 min cap: a handful of attempts per row, not hundreds.
    assert.ok(during - before <= 4 + PAUSE_MS / 5000, `relay attempts while the broker hung: ${before} → ${during}`);
    assertAlive(roles, 'while the broker was stopped');
  } finally {
    await broker.server.signal('SIGCONT');
  }
  await sleep(5000);
  await stopGracefully(roles[0]!, 'writer', 'writer started');
  const report = await p.settle(240_000);
  assertAlive(roles.slice(1), 'after the pause');
  recordScenario({ scenario: `${broker.kind}.sigstop`, iterations: 1, report });
});
