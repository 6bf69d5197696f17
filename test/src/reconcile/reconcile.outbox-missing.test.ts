import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { demoOrderSource } from '@postbox/api/demo/reconcile';
import { listAudit } from '@postbox/engine/control';
import { listFindings, listRuns, Reconciler } from '@postbox/engine/reconcile';
import type { Consumer, Relay } from '@postbox/engine/runtime';
import { createHandlerTables, RECORDING_HANDLER, startTestConsumer } from '../support/consumer.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, waitFor } from '../support/processes.ts';
import { startTestRelay } from '../support/relay.ts';
import { stack } from '../support/stack.ts';
import { count, payWithoutEvent, placeOrder } from './fixtures.ts';

// A business update committed without its outbox row (a code path that bypassed enqueue): the check finds the
// order at version 2 with no event for it, a dry run changes nothing, the executed repair re-emits the event
// through the order service's own command, the consumer applies it once, and a second run finds nothing.
let db: TestDatabase;
let relay: Relay;
let consumer: Consumer;
const topic = uniqueTopic('rc-missing');
const DEMO_MODULE = fileURLToPath(new URL('../../../packages/api/src/demo/reconcile.ts', import.meta.url));

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 2);
  await createHandlerTables(db.sql);
  relay = await startTestRelay(db.sql);
  consumer = await startTestConsumer(
    db.url,
    { name: 'rc-view', topics: [topic], handler: RECORDING_HANDLER, fromBeginning: true },
    { inline: true },
  );
});

after(async () => {
  await consumer?.stop();
  await relay?.stop();
  await db?.drop();
});

const applied = (orderId: string, version: number) =>
  count(db.sql, 'SELECT 1 FROM test_applied WHERE consumer = $1 AND aggregate_id = $2 AND version = $3', [
    'rc-view',
    orderId,
    version,
  ]);

test('an order paid without its event: found, dry run changes nothing, re-emitted once through the command, applied once, then nothing found', async () => {
  await placeOrder(db.sql, topic, 'order-a');
  await placeOrder(db.sql, topic, 'order-b');
  await waitFor('both orders applied', async () => (await count(db.sql, 'SELECT 1 FROM test_applied')) === 2, 60_000);
  await payWithoutEvent(db.sql, 'order-b');

  const reconciler = new Reconciler({
    sql: db.sql,
    sources: [demoOrderSource({ topic, consumers: ['rc-view'] })],
    options: { graceMs: { 'outbox-missing': 0 } },
  });
  const first = await reconciler.run('outbox-missing', { actor: 'test' });
  assert.equal(first.status, 'finished');
  assert.deepEqual(
    { scanned: first.counts.scanned, found: first.counts.found, opened: first.counts.opened },
    {
      scanned: 2,
      found: 1,
      opened: 1,
    },
  );
  const [finding, ...others] = await listFindings(db.sql, { check: 'outbox-missing' }, 10, null);
  assert.equal(others.length, 0);
  assert.equal(finding!.key, 'demo-order:order-b@2');
  assert.equal(finding!.kind, 'missing_row');
  assert.equal(finding!.status, 'open');
  assert.deepEqual(finding!.observed, { outbox: null });

  // The CLI's dry run (the default): the finding is re-checked and reported, nothing changes.
  const env = {
    DATABASE_URL: db.url,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
    REDIS_URL: stack.REDIS_URL,
    POSTBOX_RECONCILE_MODULES: `${DEMO_MODULE}?topic=${topic}`,
    POSTBOX_RECONCILE_GRACE_MS: 'outbox-missing=0',
    POSTBOX_ACTOR: 'cli-operator',
    LOG_LEVEL: 'warn',
  };
  const dry = spawnPostbox(['reconcile', '--check', 'outbox-missing', '--json'], env);
  assert.equal(await dry.exited, 1, `findings remain after a dry run: exit 1\n${dry.output()}`);
  const [dryRun] = JSON.parse(dry.output().slice(dry.output().indexOf('['))) as any[];
  assert.equal(dryRun.repair.dryRun, true);
  assert.deepEqual(
    dryRun.repair.items.map((i: any) => [i.key, i.outcome, i.action]),
    [['demo-order:order-b@2', 'would_repair', 'reemit demo-order:order-b@2']],
  );
  assert.equal(await count(db.sql, 'SELECT 1 FROM message_outbox'), 2, 'the dry run wrote no event');
  assert.equal((await listFindings(db.sql, { check: 'outbox-missing' }, 10, null))[0]!.status, 'open');

  // Executed: the order service's command writes the event; the relay and consumer carry it.
  const run = spawnPostbox(
    ['reconcile', '--check', 'outbox-missing', '--execute', '--reason', 'bypassed enqueue'],
    env,
  );
  assert.equal(await run.exited, 0, run.output());
  assert.match(run.output(), /repaired 1, stale 0, manual 0, failed 0/);
  const [event] = await db.sql<{ event_type: string; data: string }[]>`
    SELECT event_type, convert_from(payload, 'UTF8') AS data FROM message_outbox
    WHERE aggregate_id = 'order-b' AND aggregate_version = 2`;
  assert.equal(event!.event_type, 'OrderPaid');
  assert.deepEqual(JSON.parse(event!.data), { orderId: 'order-b', state: 'paid' });
  await waitFor('order-b v2 applied', async () => (await applied('order-b', 2)) > 0, 60_000);

  const second = await reconciler.run('outbox-missing', { actor: 'test' });
  assert.deepEqual({ found: second.counts.found, closed: second.counts.closed }, { found: 0, closed: 0 });
  const [closed] = await listFindings(db.sql, { check: 'outbox-missing' }, 10, null);
  assert.equal(closed!.status, 'repaired');
  assert.equal(closed!.repair?.action, 'reemit demo-order:order-b@2');
  assert.equal(closed!.repair?.actor, 'cli-operator');

  // Applied once, in order; the projection counted two applied events for order-b.
  assert.equal(await applied('order-b', 2), 1);
  const [projection] = await db.sql<{ version: string; applied_count: number }[]>`
    SELECT version::text, applied_count FROM demo_order_projection WHERE order_id = 'order-b'`;
  assert.deepEqual(projection, { version: '2', applied_count: 2 });

  // The audit log has each step: the dry run, then the re-emit with its before and after.
  const audit = (await listAudit(db.sql, {}, 20, null)).reverse();
  assert.deepEqual(
    audit.map((a) => [a.actor, a.action, a.outcome]),
    [
      ['cli-operator', 'reconcile.dry_run', 'ok'],
      ['cli-operator', 'reconcile.reemit', 'ok'],
    ],
  );
  const reemit = audit[1]!;
  assert.equal(reemit.reason, 'bypassed enqueue');
  assert.equal(reemit.target, 'reconcile:outbox-missing:demo-order:order-b@2');
  assert.deepEqual((reemit.before as any).outbox, null);
  assert.equal((reemit.after as any).outbox, 'pending');
  assert.equal(typeof (reemit.after as any).eventId, 'string');
  const runs = (await listRuns(db.sql, { check: 'outbox-missing' }, 10, null)).reverse();
  assert.deepEqual(
    runs.map((r) => [r.mode, r.status, r.actor]),
    [
      ['check', 'finished', 'test'],
      ['check', 'finished', 'cli-operator'],
      ['dry_run', 'finished', 'cli-operator'],
      ['check', 'finished', 'cli-operator'],
      ['execute', 'finished', 'cli-operator'],
      ['check', 'finished', 'test'],
    ],
  );
});
