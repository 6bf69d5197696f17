import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { alive, faultDuration, Pipeline, recordScenario, stopGracefully } from '../support/pipeline.ts';
import { startFaultBroker, type FaultBroker } from '../support/fault-broker.ts';
import type { RoleProcess } from '../support/processes.ts';
import { stack as shared } from '../support/stack.ts';

// Processes killed at random moments under load for a fixed time (POSTBOX_FAULT_KILL_LOOP_MS: 10 s in `npm test`, 60 s in `npm run test:faults`):
// two writers, two relays and two consumers; every 0.5–3 s one of them, picked at random, gets SIGKILL and is
// started again after 0–2 s. No failpoint: the kills land wherever the processes happen to be. On the broker of
// POSTBOX_FAULT_BROKER (Kafka unless `npm run test:faults -- --broker nats|rabbitmq` says otherwise).
const DURATION_MS = faultDuration('POSTBOX_FAULT_KILL_LOOP_MS', 10_000);

let db: TestDatabase;
let broker: FaultBroker;
let pipeline: Pipeline | null = null;
const topic = uniqueTopic('killloop');
const consumer = `kl${topic.slice(-6)}`;

before(async () => {
  [db, broker] = await Promise.all([freshDatabase(), startFaultBroker()]);
  await broker.createTopic(topic, 4, [`postbox.${consumer}`]);
});

after(async () => {
  await pipeline?.stopAll();
  await broker?.stop();
  await db?.drop();
});

test(`random kill -9 of writers, relays and consumers for ${DURATION_MS / 1000} s under load: the verifier finds nothing lost, doubled or reordered`, {
  timeout: DURATION_MS + 420_000,
}, async () => {
  const p = (pipeline = new Pipeline({
    databaseUrl: db.url,
    broker,
    redisUrl: shared.REDIS_URL,
    topic,
    partitions: 4,
    consumer,
    env: {
      POSTBOX_KAFKA_SESSION_TIMEOUT_MS: '3000',
      POSTBOX_KAFKA_HEARTBEAT_MS: '500',
      POSTBOX_PARTITION_LEASE_MS: '3000',
    },
  }));
  await p.setup();
  const writerEnv = { WRITER_RATE: '25', WRITER_AGGREGATES: '100', WRITER_FLAKY: '0.03' };
  const roles: Array<{ name: string; start: () => RoleProcess; current: RoleProcess }> = [
    { name: 'writer', start: () => p.writer(writerEnv) },
    { name: 'writer', start: () => p.writer(writerEnv) },
    { name: 'relay', start: () => p.relay({ POSTBOX_RELAY_THREADS: '1' }) },
    { name: 'relay', start: () => p.relay() },
    { name: 'consumer', start: () => p.consumer() },
    { name: 'consumer', start: () => p.consumer({ TEST_LIMITS: JSON.stringify({ threads: 2, maxBatchEvents: 20 }) }) },
  ].map((r) => ({ ...r, current: r.start() }));
  const kills: Record<string, number> = { writer: 0, relay: 0, consumer: 0 };
  const until = Date.now() + DURATION_MS;
  // The loop lasts its time and has killed a relay and a consumer at least once (the dice once picked no relay
  // in 25 s).
  while (Date.now() < until || kills.relay === 0 || kills.consumer === 0) {
    await sleep(500 + Math.random() * 2500);
    const role = roles[Math.floor(Math.random() * roles.length)]!;
    if (!alive(role.current)) {
      throw new Error(
        `a ${role.name} died by itself (exit ${role.current.child.exitCode}):\n${role.current.output().slice(-3000)}`,
      );
    }
    role.current.kill('SIGKILL');
    await role.current.exited;
    kills[role.name]!++;
    await sleep(Math.random() * 2000);
    role.current = role.start();
  }
  for (const r of roles.filter((x) => x.name === 'writer')) await stopGracefully(r.current, 'writer', 'writer started');
  const report = await p.settle(240_000);
  const c = report.consumers[0]!;
  assert.equal(c.lost.count, 0);
  assert.equal(c.appliedTwice!.count, 0);
  assert.equal(c.outOfOrder.count, 0);
  const total = kills.writer! + kills.relay! + kills.consumer!;
  console.log(
    `# kill loop on ${broker.kind}: ${total} kills (writers ${kills.writer}, relays ${kills.relay}, consumers ${kills.consumer}) in ${DURATION_MS / 1000} s`,
  );
  assert.ok(kills.relay! > 0 && kills.consumer! > 0, 'both relays and consumers were killed');
  recordScenario({
    scenario: broker.kind === 'kafka' ? 'kill-loop' : `kill-loop.${broker.kind}`,
    iterations: total,
    report,
  });
});
