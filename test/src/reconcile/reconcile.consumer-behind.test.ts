import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Kafka, logLevel } from 'kafkajs';
import { demoOrderSource } from '@postbox/api/demo/reconcile';
import { listAudit } from '@postbox/engine/control';
import { enqueue } from '@postbox/engine';
import { listFindings, Reconciler } from '@postbox/engine/reconcile';
import { type Consumer, type Relay, registerConsumer } from '@postbox/engine/runtime';
import { appliedSequences, createHandlerTables, RECORDING_HANDLER, startTestConsumer } from '../support/consumer.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { startTestRelay } from '../support/relay.ts';
import { stack } from '../support/stack.ts';
import { count, payOrder, placeOrder } from './fixtures.ts';

// An event that never reached a consumer: order-x's two events were published while the consumer's group was
// moved past them (its offsets reset to the end of the topic), so the consumer never sees them. The check finds
// the consumer at version 0 of an order the business holds at 2 — never delivered, not parked, not blocked —
// and the repair republishes both versions from the outbox; the consumer applies each once.
let db: TestDatabase;
let relay: Relay;
let consumer: Consumer | undefined;
const topic = uniqueTopic('rc-behind');
const NAME = 'rc-behind';

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 2);
  await createHandlerTables(db.sql);
  relay = await startTestRelay(db.sql);
});

after(async () => {
  await consumer?.stop();
  await relay?.stop();
  await db?.drop();
});

async function moveGroupToEnd(groupId: string): Promise<void> {
  const admin = new Kafka({
    clientId: 'postbox-test-admin',
    brokers: stack.KAFKA_BROKERS.split(','),
    logLevel: logLevel.NOTHING,
  }).admin();
  await admin.connect();
  try {
    // Explicit positions: the group's committed offset becomes each partition's end (a logical "latest" would
    // read as no offset, and fromBeginning would deliver everything).
    const ends = await admin.fetchTopicOffsets(topic);
    await admin.setOffsets({
      groupId,
      topic,
      partitions: ends.map((p) => ({ partition: p.partition, offset: p.high })),
    });
  } finally {
    await admin.disconnect();
  }
}

test('a published event the consumer never received: found as never delivered, republished, applied once; then nothing found', async () => {
  await placeOrder(db.sql, topic, 'order-x');
  await payOrder(db.sql, topic, 'order-x');
  await waitFor(
    'order-x published',
    async () => (await count(db.sql, "SELECT 1 FROM message_outbox WHERE status = 'published'")) === 2,
  );
  await moveGroupToEnd(`postbox.${NAME}`);
  consumer = await startTestConsumer(
    db.url,
    { name: NAME, topics: [topic], handler: RECORDING_HANDLER, fromBeginning: true },
    { inline: true },
  );
  await placeOrder(db.sql, topic, 'order-y');
  await waitFor(
    'order-y applied',
    async () => (await count(db.sql, "SELECT 1 FROM test_applied WHERE aggregate_id = 'order-y'")) === 1,
  );

  // What `postbox consume` does at start (this in-process consumer does not): the registry knows who reads the topic.
  await registerConsumer(db.sql, { name: NAME, groupId: `postbox.${NAME}`, topics: [topic] });
  const reconciler = new Reconciler({
    sql: db.sql,
    // No consumer list: the check asks the registry which consumers read the topic (the running one does).
    sources: [demoOrderSource({ topic })],
    options: { graceMs: { 'consumer-behind': 0 } },
  });
  assert.equal(
    (await reconciler.run('outbox-missing', { actor: 'test' })).counts.found,
    0,
    'every event is in the outbox',
  );
  const first = await reconciler.run('consumer-behind', { actor: 'test' });
  assert.deepEqual([first.status, first.counts.scanned, first.counts.found], ['finished', 2, 1]);
  const [finding] = await listFindings(db.sql, { check: 'consumer-behind' }, 10, null);
  assert.equal(finding!.key, `${NAME}:demo-order:order-x@2`);
  assert.equal(finding!.kind, 'never_delivered');
  assert.equal(finding!.observed.applied, 0);

  const dry = await reconciler.repair('consumer-behind', { actor: 'ops', reason: 'group reset past records' });
  assert.deepEqual(
    dry.items.map((i) => [i.outcome, i.action]),
    [['would_repair', 'republish order-x v1…2']],
  );
  assert.equal(
    await count(db.sql, "SELECT 1 FROM message_outbox WHERE status <> 'published'"),
    0,
    'the dry run requeued nothing',
  );

  const done = await reconciler.repair('consumer-behind', {
    actor: 'ops',
    reason: 'group reset past records',
    dryRun: false,
  });
  assert.deepEqual([done.status, done.counts.repaired], ['finished', 1]);
  relay.wake();
  await waitFor(
    'order-x applied',
    async () => (await appliedSequences(db.sql, NAME)).get('order-x')?.length === 2,
    60_000,
  );

  assert.equal((await reconciler.run('consumer-behind', { actor: 'test' })).counts.found, 0);
  assert.deepEqual(
    (await appliedSequences(db.sql, NAME)).get('order-x'),
    [1, 2],
    'each version applied once, in order',
  );
  assert.deepEqual((await appliedSequences(db.sql, NAME)).get('order-y'), [1], 'the other order was not touched twice');
  const [closed] = await listFindings(db.sql, { check: 'consumer-behind' }, 10, null);
  assert.equal(closed!.status, 'repaired');
  const audit = await listAudit(db.sql, { action: 'outbox.republish' }, 10, null);
  assert.equal(audit.length, 1);
  assert.equal(audit[0]!.actor, 'ops');
  assert.deepEqual(audit[0]!.after, { requeued: [1, 2] });
  assert.match(
    audit[0]!.reason!,
    /group reset past records \(reconcile finding \d+: consumer-behind rc-behind:demo-order:order-x@2\)/,
  );
});

test('a failure left open and a version gap left parked past the SLA: both found, the gap back-filled by republishing, the failure left to an operator', async () => {
  // A poison event: the consumer keeps it in the failure store.
  await db.sql.begin((tx) =>
    enqueue(
      tx,
      { event_type: 'OrderPlaced', aggregate_id: 'order-p', aggregate_version: 1, data: { poison: true } },
      { topic, producer: 'demo-orders' },
    ),
  );
  await placeOrder(db.sql, topic, 'order-z');
  await waitFor(
    'order-p failed, order-z applied',
    async () =>
      (await count(db.sql, "SELECT 1 FROM message_failure WHERE status = 'open'")) === 1 &&
      (await appliedSequences(db.sql, NAME)).get('order-z')?.length === 1,
  );
  // order-z v2 published while the consumer was down and its group moved past it; v3 arrives: parked behind v2.
  await consumer!.stop();
  await payOrder(db.sql, topic, 'order-z');
  await waitFor(
    'order-z v2 published',
    async () => (await count(db.sql, "SELECT 1 FROM message_outbox WHERE status <> 'published'")) === 0,
  );
  await moveGroupToEnd(`postbox.${NAME}`);
  await db.sql.begin(async (tx) => {
    await tx`UPDATE demo_order SET state = 'shipped', version = 3 WHERE order_id = 'order-z'`;
    await enqueue(
      tx,
      { event_type: 'OrderShipped', aggregate_id: 'order-z', aggregate_version: 3, data: { orderId: 'order-z' } },
      { topic, producer: 'demo-orders' },
    );
  });
  consumer = await startTestConsumer(
    db.url,
    { name: NAME, topics: [topic], handler: RECORDING_HANDLER, fromBeginning: true },
    { inline: true },
  );
  await waitFor(
    'order-z v3 parked',
    async () => (await count(db.sql, "SELECT 1 FROM message_parked WHERE aggregate_id = 'order-z'")) === 1,
    60_000,
  );

  const withinSla = new Reconciler({ sql: db.sql });
  assert.equal((await withinSla.run('stale-failures', { actor: 'test' })).counts.found, 0, 'both younger than a day');

  const reconciler = new Reconciler({ sql: db.sql, options: { graceMs: { 'stale-failures': 0 } } });
  const run = await reconciler.run('stale-failures', { actor: 'test' });
  assert.deepEqual([run.status, run.counts.found], ['finished', 2]);
  const findings = await listFindings(db.sql, { check: 'stale-failures' }, 10, null);
  const byKind = new Map(findings.map((f) => [f.kind, f]));
  assert.deepEqual(
    [byKind.get('open_failure')!.status, byKind.get('open_failure')!.observed.errorCode],
    ['manual', 'test_poison'],
  );
  const gap = byKind.get('parked_gap')!;
  assert.deepEqual(
    [gap.key, gap.status, gap.expected.version, gap.observed.firstParked],
    [`gap:${NAME}/order-z@2`, 'open', 2, 3],
  );

  const dry = await reconciler.repair('stale-failures', { actor: 'ops', reason: 'gap older than a day' });
  assert.deepEqual(
    dry.items.map((i) => [i.outcome, i.action]),
    [['would_repair', 'republish order-z v2']],
  );
  const done = await reconciler.repair('stale-failures', {
    actor: 'ops',
    reason: 'gap older than a day',
    dryRun: false,
  });
  assert.deepEqual([done.status, done.counts.repaired], ['finished', 1]);
  relay.wake();
  await waitFor(
    'order-z applied through v3',
    async () => (await appliedSequences(db.sql, NAME)).get('order-z')?.length === 3,
    60_000,
  );
  assert.deepEqual((await appliedSequences(db.sql, NAME)).get('order-z'), [1, 2, 3], 'the gap closed, in order, once');
  assert.equal(await count(db.sql, 'SELECT 1 FROM message_parked'), 0);

  const again = await reconciler.run('stale-failures', { actor: 'test' });
  assert.equal(again.counts.found, 1, 'the failure waits for its operator');
  const after = new Map((await listFindings(db.sql, { check: 'stale-failures' }, 10, null)).map((f) => [f.kind, f]));
  assert.deepEqual([after.get('parked_gap')!.status, after.get('open_failure')!.status], ['repaired', 'manual']);
});
