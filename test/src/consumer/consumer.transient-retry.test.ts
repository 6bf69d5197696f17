import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import {
  appliedSequences,
  ceRecord,
  committedOffsets,
  createHandlerTables,
  produce,
  RECORDING_HANDLER,
  startTestConsumer,
} from '../support/consumer.ts';

let db: TestDatabase;
const topic = uniqueTopic('transient');

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 1);
  await createHandlerTables(db.sql);
});

after(async () => {
  await db.drop();
});

test('a transient handler error blocks only its aggregate, is retried with backoff, and holds the watermark until it settles', async () => {
  const records = [ceRecord({ aggregate_id: 't-flaky', version: 1, data: { failTimes: 5 } })];
  for (let v = 1; v <= 3; v++) {
    if (v > 1) records.push(ceRecord({ aggregate_id: 't-flaky', version: v }));
    for (let a = 0; a < 20; a++) records.push(ceRecord({ aggregate_id: `t-${a}`, version: v }));
  }
  await produce(topic, records);
  // Inline: one thread, so the fixture's per-thread call counter sees every attempt.
  const consumer = await startTestConsumer(
    db.url,
    { name: 'flaky', topics: [topic], handler: RECORDING_HANDLER },
    { inline: true },
  );
  try {
    await waitFor(
      'the healthy aggregates applied',
      async () => (await appliedSequences(db.sql, 'flaky')).size >= 20,
      20_000,
    );
    await waitFor(
      'everything applied',
      async () => consumer.stats().applied + consumer.stats().drained === records.length,
      40_000,
    );
  } finally {
    await consumer.stop();
  }
  const stats = consumer.stats();
  assert.ok(stats.transientRetries >= 2, `retried (${stats.transientRetries})`);
  assert.equal(stats.failed, 0);
  const sequences = await appliedSequences(db.sql, 'flaky');
  assert.deepEqual(sequences.get('t-flaky'), [1, 2, 3]);
  for (let a = 0; a < 20; a++) assert.deepEqual(sequences.get(`t-${a}`), [1, 2, 3]);
  assert.equal((await committedOffsets('postbox.flaky', topic)).get(0), String(records.length));
});
