import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Redis } from 'ioredis';
import { defineConsumer } from '@postbox/engine';
import { BullmqRetryScheduler } from '@postbox/engine/bullmq';
import { listFindings, Reconciler } from '@postbox/engine/reconcile';
import type { Consumer, RetryScheduler } from '@postbox/engine/runtime';
import { defineSaga, readSaga, SagaOrchestrator, sagaHistory } from '@postbox/engine/saga';
import { startConsumer } from '@postbox/workers';
import { ceRecord, createHandlerTables, produce, RECORDING_HANDLER } from '../support/consumer.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';
import { count } from './fixtures.ts';

// The alarm clocks: retry jobs live in Redis (the ledger in PostgreSQL is the truth), saga timers are the saga
// rows themselves. Redis loses the jobs of two waiting retries (the consumer's own ledger reconciliation is set
// to an hour, so only the check can notice), and a saga's timer is due while no timer runner runs: each is a
// finding, and each repair makes the lost alarm fire exactly once.
let db: TestDatabase;
let consumer: Consumer | undefined;
const schedulers = new Map<string, RetryScheduler>();
const topic = uniqueTopic('rc-retry');
const NAME = `rc-retry-${topic.slice(-6)}`;

before(async () => {
  db = await freshDatabase();
  process.env.DATABASE_URL = db.url; // the recording handler logs every attempt (test_attempt) there
  await createTopic(topic, 1);
  await createHandlerTables(db.sql);
});

after(async () => {
  await consumer?.stop();
  await Promise.all([...schedulers.values()].map((s) => s.close()));
  await db?.drop();
});

const schedulerFor = (consumerName: string) => {
  let s = schedulers.get(consumerName);
  if (!s)
    schedulers.set(consumerName, (s = new BullmqRetryScheduler({ redisUrl: stack.REDIS_URL, consumer: consumerName })));
  return s;
};

/** What a Redis that lost its data (no AOF, FLUSHALL) does to one consumer's alarms, without touching anyone else's. */
async function wipeQueue(queueName: string): Promise<number> {
  const redis = new Redis(stack.REDIS_URL);
  try {
    let removed = 0;
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `bull:${queueName}:*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) removed += await redis.del(...keys);
    } while (cursor !== '0');
    return removed;
  } finally {
    redis.disconnect();
  }
}

test('Redis wiped while two retries wait: both found, re-armed, each retry runs once and applies once', async () => {
  await db.sql`UPDATE test_handler_control SET fail_aggregates = '{rj-1,rj-2}' WHERE id = 1`;
  const definition = defineConsumer({
    name: NAME,
    topics: [topic],
    handler: RECORDING_HANDLER,
    fromBeginning: true,
    retry: { maxAttempts: 5, baseMs: 1, capMs: 1, minDelayMs: 6000 },
  });
  consumer = await startConsumer(definition, {
    databaseUrl: db.url,
    broker: { kind: 'kafka', kafka: { brokers: stack.KAFKA_BROKERS.split(','), clientId: 'postbox-test' } },
    redisUrl: stack.REDIS_URL,
    retryReconcileMs: 3_600_000,
    inline: true,
  });
  await produce(
    topic,
    ['rj-1', 'rj-2', 'rj-ok'].map((id) => ceRecord({ aggregate_id: id, version: 1 })),
  );
  await waitFor(
    'two retries on the ledger',
    async () => (await count(db.sql, "SELECT 1 FROM message_retry WHERE status = 'scheduled'")) === 2,
    60_000,
  );
  await db.sql`UPDATE test_handler_control SET fail_aggregates = '{}' WHERE id = 1`; // the downstream is back
  assert.ok((await wipeQueue(`postbox-retry.${NAME}`)) > 0, 'the queue had the jobs');

  const reconciler = new Reconciler({ sql: db.sql, schedulerFor, options: { graceMs: { 'retry-job-missing': 0 } } });
  const run = await reconciler.run('retry-job-missing', { actor: 'test' });
  assert.deepEqual([run.status, run.counts.found], ['finished', 2]);
  const findings = await listFindings(db.sql, { check: 'retry-job-missing' }, 10, null);
  assert.deepEqual(
    findings.map((f) => f.observed.job),
    ['missing', 'missing'],
  );

  const repaired = await reconciler.repair('retry-job-missing', {
    actor: 'ops',
    reason: 'redis lost its data',
    dryRun: false,
  });
  assert.deepEqual([repaired.status, repaired.counts.repaired], ['finished', 2]);
  await waitFor(
    'both retries applied',
    async () => (await count(db.sql, "SELECT 1 FROM message_retry WHERE status = 'done'")) === 2,
    60_000,
  );

  for (const id of ['rj-1', 'rj-2']) {
    const attempts = await db.sql<
      { attempt: number }[]
    >`SELECT attempt FROM test_attempt WHERE aggregate_id = ${id} ORDER BY seq`;
    // Attempt 1 may be logged twice (a failed batch is run again one event per transaction); retries are not.
    assert.deepEqual(
      attempts.map((a) => a.attempt).filter((a) => a > 1),
      [2],
      `${id}: the first delivery failed, the re-armed retry ran once`,
    );
    assert.equal(await count(db.sql, 'SELECT 1 FROM test_applied WHERE aggregate_id = $1', [id]), 1);
  }
  const again = await reconciler.run('retry-job-missing', { actor: 'test' });
  assert.equal(again.counts.found, 0);
  const audit = await db.sql<{ action: string; after: { job: string } }[]>`
    SELECT action, after FROM operator_audit WHERE action = 'reconcile.rearm_retry' ORDER BY audit_id`;
  assert.deepEqual(
    audit.map((a) => a.after.job),
    ['enqueued', 'enqueued'],
  );
});

test('a saga timer due while no timer runner runs: found, fired once through the orchestrator, then nothing found', async () => {
  const definition = defineSaga<{ orderId: string }>({
    type: 'rc-timer',
    version: 1,
    replyTopic: 'rc-timer.replies',
    steps: [
      {
        name: 'reserve',
        topic: 'rc-timer.inventory',
        command: (d) => ({ type: 'inventory.reserve', data: d }),
        success: ['inventory.reserved'],
        failure: [],
        timeoutMs: 1000,
      },
    ],
  });
  const sagas = new SagaOrchestrator([definition]);
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, definition, { businessKey: 'o-1', data: { orderId: 'o-1' } }),
  );
  // Two minutes later, with no runner: the timer (due after 1 s) is 119 s overdue, past the 60 s grace.
  const later = () => Date.now() + 120_000;
  const reconciler = new Reconciler({ sql: db.sql, sagas, clock: later });
  const run = await reconciler.run('saga-timer-unfired', { actor: 'test' });
  assert.deepEqual([run.status, run.counts.found], ['finished', 1]);
  const [finding] = await listFindings(db.sql, { check: 'saga-timer-unfired' }, 10, null);
  assert.deepEqual([finding!.key, finding!.kind, finding!.status], [sagaId, 'timeout_unfired', 'open']);

  const repaired = await reconciler.repair('saga-timer-unfired', {
    actor: 'ops',
    reason: 'timer runner down',
    dryRun: false,
  });
  assert.deepEqual([repaired.counts.repaired, repaired.items[0]!.detail], [1, 'running → resolving']);
  const saga = await readSaga(db.sql, sagaId);
  assert.deepEqual([saga!.status, saga!.direction, saga!.version], ['resolving', 'query', 2]);
  assert.deepEqual(
    (await sagaHistory(db.sql, sagaId)).map((h) => `${h.from ?? '-'}→${h.to}`),
    ['-→running', 'running→resolving'],
    'the timer fired once',
  );
  const commands = await db.sql<{ v: string; direction: string }[]>`
    SELECT aggregate_version::text AS v, extensions->>'sagadirection' AS direction FROM message_outbox
    WHERE aggregate_id = ${`saga:${sagaId}:reserve`} ORDER BY aggregate_version`;
  assert.deepEqual(
    commands.map((c) => [c.v, c.direction]),
    [
      ['1', 'forward'],
      ['2', 'query'],
    ],
  );

  // Its next timer is due a second after the repair: not overdue, nothing found, nothing fired again.
  assert.equal((await reconciler.run('saga-timer-unfired', { actor: 'test' })).counts.found, 0);
  assert.equal(
    (await reconciler.repair('saga-timer-unfired', { actor: 'ops', reason: 'again', dryRun: false })).counts.planned,
    0,
  );
  assert.equal((await readSaga(db.sql, sagaId))!.version, 2);
  const [closed] = await listFindings(db.sql, { check: 'saga-timer-unfired' }, 10, null);
  assert.equal(closed!.status, 'repaired');
});
