import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { enqueueMany } from '@postbox/engine';
import { backfillGaps, reportGaps } from '@postbox/engine/control';
import type { Relay } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { startTestRelay } from '../support/relay.ts';
import { appliedSequences, createHandlerTables, RECORDING_HANDLER, startTestConsumer } from '../support/consumer.ts';

let db: TestDatabase;
let relay: Relay | undefined;
const topic = uniqueTopic('gap');

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 2);
  await createHandlerTables(db.sql);
});

after(async () => {
  await relay?.stop();
  await db.drop();
});

test('a gap that does not close is reported (expected version, parked versions, age) and back-filled from the outbox', async () => {
  await db.sql.begin((tx) =>
    enqueueMany(
      tx,
      [1, 2, 3, 4].map((v) => ({ event_type: 'TestEvent', aggregate_id: 'g-1', aggregate_version: v, data: { v } })),
      { topic },
    ),
  );
  // Version 2 "was published" but never reached the topic (lost downstream): the relay skips it.
  await db.sql`UPDATE message_outbox SET status = 'published', published_at = now() WHERE aggregate_version = 2`;
  relay = await startTestRelay(db.sql);
  const consumer = await startTestConsumer(db.url, { name: 'gappy', topics: [topic], handler: RECORDING_HANDLER });
  try {
    await waitFor(
      'v1 applied, v3 and v4 parked',
      async () => consumer.stats().applied === 1 && consumer.stats().parked === 2,
      30_000,
    );
    assert.deepEqual(
      await reportGaps(db.sql, { consumer: 'gappy', olderThanMs: 60_000 }),
      [],
      'a young gap is not reported',
    );
    const [gap, ...rest] = await reportGaps(db.sql, { consumer: 'gappy', olderThanMs: 0 });
    assert.equal(rest.length, 0);
    assert.equal(gap!.aggregate_id, 'g-1');
    assert.equal(gap!.expected_version, 2);
    assert.deepEqual(gap!.parked_versions, [3, 4]);
    assert.ok(gap!.age_ms >= 0 && gap!.blocked === false);
    const [filled] = await backfillGaps(db.sql, [gap!]);
    assert.deepEqual(filled, { consumer: 'gappy', aggregate_id: 'g-1', requeued: [2], missing: [] });
    relay.wake();
    await waitFor('the gap closed', async () => consumer.stats().drained === 2, 30_000);
  } finally {
    await consumer.stop();
  }
  assert.deepEqual((await appliedSequences(db.sql, 'gappy')).get('g-1'), [1, 2, 3, 4]);
  assert.deepEqual(await reportGaps(db.sql, { olderThanMs: 0 }), []);
});
