import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import type { FaultProxy } from '../support/fault-proxy.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { alive, faultIterations, Pipeline, recordScenario, stopGracefully } from '../support/pipeline.ts';
import { createPrivateTopic, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import type { RoleProcess } from '../support/processes.ts';
import { stack as shared } from '../support/stack.ts';

// Unknown outcomes (docs/design.md §12): the peer acted, the reply never came back — the fault proxy forwards a request,
// drops its reply and cuts the connection. Kafka: the broker appended a produce request; PostgreSQL: a COMMIT (a
// consumer's, the writer's) or a relay's UPDATE took effect. Then latency and cut connections in front of
// PostgreSQL, Kafka and Redis. Private servers behind the proxies; nothing is restarted by the test.
const DROPS = faultIterations(6);

let servers: PrivateStack;
const pipelines: Pipeline[] = [];
let db: TestDatabase;

before(async () => {
  servers = await startPrivateStack({ kafka: { proxy: true }, postgres: { proxy: true }, redis: { proxy: true } });
  db = await freshDatabase('pbx', servers.direct.DATABASE_URL!);
});

after(async () => {
  for (const p of pipelines) await p.stopAll();
  await db?.drop().catch(() => {});
  await servers?.stop();
});

function assertAlive(roles: RoleProcess[], when: string): void {
  for (const r of roles)
    assert.ok(alive(r), `${r.child.spawnargs.slice(2).join(' ')} died ${when}:\n${r.output().slice(-3000)}`);
}

/** Drops `count` matching replies one at a time, waiting for each to be dropped (or giving up after 15 s). */
async function dropEach(proxy: FaultProxy, count: number, tag?: RegExp): Promise<number> {
  let dropped = 0;
  for (let i = 0; i < count; i++) {
    proxy.dropReplies({ count: 1, ...(tag ? { tag } : {}) });
    const deadline = Date.now() + 15_000;
    while (proxy.dropsLeft() > 0 && Date.now() < deadline) await sleep(50);
    if (proxy.dropsLeft() === 0) dropped++;
    await sleep(300 + Math.random() * 700);
  }
  proxy.dropReplies({ count: 0 });
  return dropped;
}

test(`Kafka produce replies dropped after the broker appended (${DROPS} times), then latency and cuts: same-id re-sends, duplicates counted, positions right`, {
  timeout: 300_000 + DROPS * 20_000,
}, async () => {
  const topic = uniqueTopic('pxkafka');
  await createPrivateTopic(servers, topic, 3);
  const proxy = servers.proxies.kafka!;
  const p = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: servers.urls.KAFKA_BROKERS!,
    redisUrl: shared.REDIS_URL,
    topic,
    partitions: 3,
    consumer: `pk${topic.slice(-6)}`,
  });
  pipelines.push(p);
  await p.setup();
  const roles = [p.writer({ WRITER_RATE: '40', WRITER_AGGREGATES: '60' }), p.relay(), p.consumer()];
  await sleep(6000);
  const dropped = await dropEach(proxy, DROPS);
  proxy.setLatency(100);
  await sleep(5000);
  proxy.setLatency(0);
  for (let i = 0; i < 3; i++) {
    proxy.cut();
    await sleep(2000);
  }
  assertAlive(roles, 'after the faults');
  await stopGracefully(roles[0]!, 'writer', 'writer started');
  const report = await p.settle(180_000);
  assert.equal(dropped, DROPS, `every reply drop happened (${dropped})`);
  assert.equal(report.log.positionConflicts.count, 0, 'every stored position holds its event');
  console.log(
    `# kafka proxy: ${dropped} produce replies dropped, ${proxy.stats().cuts} connections cut; ${report.log.duplicates} duplicate sends`,
  );
  recordScenario({ scenario: 'proxy.kafka-produce-reply', iterations: dropped, report });
});

test(`PostgreSQL COMMIT and relay UPDATE replies dropped after they took effect (${DROPS} times), latency and cuts before PostgreSQL and Redis: no double effect, nothing lost`, {
  timeout: 300_000 + DROPS * 40_000,
}, async () => {
  const topic = uniqueTopic('pxpg');
  // The private broker (its proxy only forwards here): the shared one may be restarting for another test, and a
  // topic created just then stayed unknown to it for over a minute.
  await createPrivateTopic(servers, topic, 3);
  const proxy = servers.proxies.postgres!;
  const viaProxy = db.url.replace(`:${new URL(servers.direct.DATABASE_URL!).port}/`, `:${proxy.port}/`);
  const p = new Pipeline({
    databaseUrl: viaProxy,
    adminDatabaseUrl: db.url,
    kafkaBrokers: servers.urls.KAFKA_BROKERS!,
    redisUrl: servers.urls.REDIS_URL!,
    topic,
    partitions: 3,
    consumer: `pp${topic.slice(-6)}`,
  });
  pipelines.push(p);
  await p.setup();
  const writer = p.writer({ WRITER_RATE: '30', WRITER_AGGREGATES: '60', WRITER_FLAKY: '0.05' });
  const roles = [writer, p.relay(), p.consumer()];
  await sleep(6000);
  const commits = await dropEach(proxy, DROPS, /^COMMIT/);
  const updates = await dropEach(proxy, Math.ceil(DROPS / 2), /^UPDATE/);
  for (const px of [proxy, servers.proxies.redis!]) {
    px.setLatency(50);
    await sleep(4000);
    px.setLatency(0);
    px.cut();
    await sleep(2000);
  }
  assertAlive(roles, 'after the faults');
  await stopGracefully(writer, 'writer', 'writer started');
  const writerStats = JSON.parse(
    writer
      .output()
      .split('\n')
      .find((l) => l.includes('"writer-stats"'))!,
  )['writer-stats'];
  const report = await p.settle(180_000);
  const [partial] = await p.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM fault_aggregate f WHERE f.version <> (SELECT count(*) FROM message_outbox o WHERE o.aggregate_id = f.id)`;
  assert.equal(
    partial!.n,
    0,
    'each business version has exactly one event: unknown commits were looked up, not repeated',
  );
  assert.ok(commits >= DROPS / 2, `COMMIT replies dropped: ${commits}`);
  console.log(
    `# postgres proxy: ${commits} COMMIT and ${updates} UPDATE replies dropped; the writer resolved ${writerStats.unknown} unknown commits by looking them up`,
  );
  recordScenario({ scenario: 'proxy.postgres-commit-reply', iterations: commits + updates, report });
});
