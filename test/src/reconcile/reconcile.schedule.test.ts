import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { demoOrderSource } from '@postbox/api/demo/reconcile';
import { ReconcileSchedule } from '@postbox/engine/bullmq';
import { listRuns, Reconciler } from '@postbox/engine/reconcile';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';
import { payWithoutEvent, placeOrder } from './fixtures.ts';

// Scheduled runs: two processes run the schedule of one check (a BullMQ job scheduler, once a second); every
// tick becomes one run, recorded with trigger `scheduled`, and the finding appears without anyone asking.
let db: TestDatabase;
const queueName = `postbox-reconcile-test-${uniqueTopic('q').slice(-8)}`;
const schedules: ReconcileSchedule[] = [];

before(async () => {
  db = await freshDatabase();
});
after(async () => {
  await Promise.all(schedules.map((s) => s.close()));
  const connection = new Redis(stack.REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection });
  await queue.obliterate({ force: true }).catch(() => {});
  await queue.close();
  connection.disconnect();
  await db?.drop();
});

test('a scheduled check runs by itself in one of two processes at a time and finds the broken order', async () => {
  const topic = uniqueTopic('rc-sched');
  await placeOrder(db.sql, topic, 'order-s');
  await payWithoutEvent(db.sql, 'order-s');
  for (let i = 0; i < 2; i++) {
    const reconciler = new Reconciler({
      sql: db.sql,
      sources: [demoOrderSource({ topic, consumers: [] })],
      options: { graceMs: { 'outbox-missing': 0 } },
    });
    const s = new ReconcileSchedule({
      redisUrl: stack.REDIS_URL,
      reconciler,
      checks: ['outbox-missing'],
      everyMs: 1000,
      queueName,
    });
    schedules.push(s);
    await s.start();
  }
  const runs = await waitFor(
    'three scheduled runs',
    async () => {
      const r = await listRuns(db.sql, { check: 'outbox-missing' }, 10, null);
      return r.filter((x) => x.status === 'finished').length >= 3 ? r : undefined;
    },
    30_000,
  );
  assert.ok(runs.every((r) => r.trigger === 'scheduled' && r.actor === 'postbox-schedule'));
  assert.ok(runs.every((r) => r.status === 'finished' || r.status === 'skipped'));
  const [finding] = await db.sql<{ business_key: string; status: string; runs: number }[]>`
    SELECT business_key, status, (last_run_id - first_run_id)::int AS runs FROM reconciliation_finding`;
  assert.deepEqual([finding!.business_key, finding!.status], ['demo-order:order-s@2', 'open']);
  assert.ok(finding!.runs >= 1, 'later runs updated the one finding, none added another');
  const [n] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM reconciliation_finding`;
  assert.equal(n!.n, 1);
});
