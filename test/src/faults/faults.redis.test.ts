import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { alive, Pipeline, recordScenario, stopGracefully } from '../support/pipeline.ts';
import { restart, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { waitFor } from '../support/processes.ts';
import { stack as shared } from '../support/stack.ts';

// Redis (the retry schedule's alarm clock; the ledger in PostgreSQL is the truth) crashes under load while
// retries wait in it: SIGKILL and a restart from its AOF (everysec: at most about a second of jobs lost), then
// SIGKILL with its data wiped. The consumer is never restarted: its BullMQ connections come back by themselves
// and ledger reconciliation re-enqueues every job Redis lost. A private Redis; the shared one is never touched.
let redis: PrivateStack;
let db: TestDatabase;
let pipeline: Pipeline | null = null;

before(async () => {
  [redis, db] = await Promise.all([startPrivateStack({ redis: true }), freshDatabase()]);
});

after(async () => {
  await pipeline?.stopAll();
  await redis?.stop();
  await db?.drop();
});

async function scheduled(p: Pipeline): Promise<number> {
  const [r] = await p.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_retry WHERE status = 'scheduled'`;
  return r!.n;
}

test('Redis crash with AOF, then Redis wiped, while retries wait in it: every retry still runs once, nothing lost', {
  timeout: 420_000,
}, async () => {
  const topic = uniqueTopic('redis');
  await createTopic(topic, 3);
  const p = (pipeline = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: shared.KAFKA_BROKERS,
    redisUrl: redis.urls.REDIS_URL!,
    topic,
    partitions: 3,
    consumer: `rd${topic.slice(-6)}`,
    env: { TEST_RETRY: JSON.stringify({ maxAttempts: 3, baseMs: 200, capMs: 500, minDelayMs: 5000 }) },
  }));
  await p.setup();
  const writer = p.writer({ WRITER_RATE: '30', WRITER_AGGREGATES: '80', WRITER_FLAKY: '0.25' });
  const relay = p.relay();
  const consumer = p.consumer();
  await waitFor('retries waiting in Redis', async () => (await scheduled(p)) >= 20, 90_000, 500).catch(
    async (cause: Error) => {
      throw new Error(`${cause.message}\n${await p.diagnose()}`, { cause });
    },
  );
  const atCrash = await scheduled(p);
  await redis.redis!.signal('SIGKILL');
  await redis.redis!.waitForExit();
  await sleep(3000);
  await restart(redis.redis!);
  await waitFor('retries waiting in Redis again', async () => (await scheduled(p)) >= 20, 60_000, 500);
  const atWipe = await scheduled(p);
  await redis.redis!.signal('SIGKILL');
  await redis.redis!.waitForExit();
  await redis.redis!.purge();
  await sleep(3000);
  await restart(redis.redis!);
  await sleep(8000);
  for (const r of [writer, relay, consumer])
    assert.ok(alive(r), `${r.child.spawnargs.slice(2).join(' ')} died:\n${r.output().slice(-3000)}`);
  await stopGracefully(writer, 'writer', 'writer started');
  const report = await p.settle(180_000, { stuckAfterMs: 30_000 });
  assert.equal(await scheduled(p), 0, 'no retry left on the ledger');
  await stopGracefully(consumer, 'consumer');
  const stats = JSON.parse(
    consumer
      .output()
      .split('\n')
      .find((l) => l.includes('"consumer-stats"'))!,
  )['consumer-stats'];
  assert.ok(
    stats.retriesReconciled >= 1,
    `reconciliation re-enqueued what the wiped Redis lost (${stats.retriesReconciled})`,
  );
  const [ran] = await p.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_retry WHERE status = 'done'`;
  console.log(
    `# redis: ${atCrash} retries waiting at the crash, ${atWipe} at the wipe; ${ran!.n} retries done, ${stats.retriesReconciled} jobs re-enqueued by reconciliation`,
  );
  recordScenario({ scenario: 'redis.crash-and-wipe', iterations: 2, report });
});
