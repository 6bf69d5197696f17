import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { newEventId } from '@postbox/engine';
import { BullmqRetryScheduler } from '@postbox/engine/bullmq';
import { reconcileLedger, type RetryJob } from '@postbox/engine/runtime';
import { scheduleRetry } from '@postbox/engine/testing';
import { stackStatus, stackUp } from '@postbox/stack';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

let db: TestDatabase;
const queueName = `retry-test-${randomBytes(4).toString('hex')}`;

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  await stackUp({ quiet: true });
  await db.drop();
});

async function ledger(count: number, delayMs: number): Promise<RetryJob[]> {
  const jobs: RetryJob[] = [];
  for (let i = 0; i < count; i++) {
    const eventId = newEventId();
    const dueAt = await scheduleRetry(db.sql, {
      consumer: 'c1',
      eventId,
      aggregateId: `a-${i}`,
      aggregateVersion: 1,
      topic: 't',
      record: { topic: 't', partition: 0, offset: String(i), key: `a-${i}`, value: null, headers: {} },
      attempt: 2,
      delayMs,
      deadline: null,
      errorCode: 'error',
      error: 'downstream 503',
    });
    jobs.push({ consumer: 'c1', eventId, attempt: 2, dueAt: dueAt.getTime() });
  }
  return jobs;
}

test('scheduled retries survive a Redis crash (AOF everysec), and a flushed Redis is rebuilt from the ledger', async () => {
  const scheduler = new BullmqRetryScheduler({ redisUrl: stack.REDIS_URL, consumer: 'c1', queueName });
  const jobs = await ledger(50, 8000);
  for (const job of jobs) await scheduler.schedule(job);
  // Scheduling twice is one job (deterministic id).
  await scheduler.schedule(jobs[0]!);
  await scheduler.close();

  // AOF everysec: what was written more than a second ago survives a SIGKILL.
  await new Promise((r) => setTimeout(r, 1500));
  const redis = (await stackStatus()).services.find((s) => s.name === 'redis');
  assert.ok(redis?.running && redis.pid);
  process.kill(redis.pid, 'SIGKILL');
  await waitFor(
    'redis to die',
    async () => !(await stackStatus()).services.find((s) => s.name === 'redis')?.running,
    20_000,
  );
  await stackUp({ quiet: true });

  const after1 = new BullmqRetryScheduler({ redisUrl: stack.REDIS_URL, consumer: 'c1', queueName });
  let present = 0;
  for (const job of jobs) if (await after1.has(job)) present++;
  assert.equal(present, 50, 'every delayed job is still there after the crash');
  assert.deepEqual(await reconcileLedger(db.sql, after1), { checked: 50, reenqueued: 0, examples: [] });

  // Redis loses everything: the ledger re-enqueues every row.
  const raw = new Redis(stack.REDIS_URL);
  await raw.flushall();
  await raw.quit();
  for (const job of jobs) assert.equal(await after1.has(job), false);
  const rebuilt = await reconcileLedger(db.sql, after1, { pageSize: 7 });
  assert.deepEqual(
    { checked: rebuilt.checked, reenqueued: rebuilt.reenqueued, examples: rebuilt.examples.length },
    { checked: 50, reenqueued: 50, examples: 5 },
  );

  // And the rebuilt jobs fire, each once, no earlier than the ledger's due time.
  const fired = new Map<string, number>();
  after1.start(async (job) => {
    fired.set(job.eventId, (fired.get(job.eventId) ?? 0) + 1);
  });
  await waitFor('every job to fire', async () => fired.size === 50, 30_000);
  await new Promise((r) => setTimeout(r, 500));
  assert.deepEqual([...new Set(fired.values())], [1]);
  const [early] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_retry WHERE next_attempt_at > now()`;
  assert.equal(early!.n, 0, 'no job fired before its ledger row was due');
  await after1.close();
});
