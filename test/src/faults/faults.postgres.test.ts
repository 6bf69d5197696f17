import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { alive, faultIterations, Pipeline, recordScenario, stopGracefully } from '../support/pipeline.ts';
import { restart, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import type { RoleProcess } from '../support/processes.ts';
import { stack as shared } from '../support/stack.ts';

// PostgreSQL stops at once (pg_ctl stop -m immediate: SIGQUIT to the postmaster, no checkpoint, every backend
// gone) mid-stream and comes back after 5 s with crash recovery — a private server, the shared one is never
// touched. Writer, relay and consumer are not restarted by the test: every role must reconnect by itself, lose
// nothing and leave no lease stuck.
const STOPS = Math.max(1, Math.ceil(faultIterations(10) / 10));

let pg: PrivateStack;
let db: TestDatabase;
let pipeline: Pipeline | null = null;

before(async () => {
  pg = await startPrivateStack({ postgres: {} });
  db = await freshDatabase('pbf', pg.urls.DATABASE_URL!);
});

after(async () => {
  await pipeline?.stopAll();
  await db?.drop().catch(() => {});
  await pg?.stop();
});

function assertAlive(roles: RoleProcess[], when: string): void {
  for (const r of roles)
    assert.ok(alive(r), `${r.child.spawnargs.slice(2).join(' ')} died ${when}:\n${r.output().slice(-3000)}`);
}

test(`PostgreSQL immediate stop mid-stream, ${STOPS} times, back after 5 s: all roles reconnect, nothing lost, no stuck lease`, {
  timeout: 480_000,
}, async () => {
  const topic = uniqueTopic('pgstop');
  await createTopic(topic, 3);
  const p = (pipeline = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: shared.KAFKA_BROKERS,
    redisUrl: shared.REDIS_URL,
    topic,
    partitions: 3,
    consumer: `pgstop${topic.slice(-6)}`,
  }));
  await p.setup();
  const roles = [
    p.writer({ WRITER_RATE: '30', WRITER_AGGREGATES: '60', WRITER_FLAKY: '0.02' }),
    p.relay({ POSTBOX_RELAY_THREADS: '1' }),
    p.consumer(),
  ];
  await sleep(8000);
  for (let i = 0; i < STOPS; i++) {
    await pg.postgres!.signal('SIGQUIT');
    await pg.postgres!.waitForExit();
    await sleep(5000);
    await restart(pg.postgres!);
    await sleep(10_000);
    assertAlive(roles, `after PostgreSQL stop ${i + 1}`);
  }
  await stopGracefully(roles[0]!, 'writer', 'writer started');
  const report = await p.settle(180_000, { stuckAfterMs: 30_000 });
  assertAlive(roles.slice(1), 'after the stops');
  const writerErrors = roles[0]!.output();
  // 57P01 terminated by the stop, 57P03 a connection made while the server shut down, 08xxx lost links.
  assert.match(
    writerErrors,
    /writer: transaction failed \((network_|pg_57p01|pg_57p03|pg_08)/,
    'the writer saw the outage as connection errors and retried',
  );
  recordScenario({ scenario: 'postgres.immediate-stop', iterations: STOPS, report });
});
