import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { enqueueMany } from '@postbox/engine';
import { KafkaPublisher } from '@postbox/engine/kafka';
import { inlineExecutor, Relay, resolveRelayOptions, type Publisher } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, readTopic, uniqueTopic } from '../support/kafka.ts';
import { stack } from '../support/stack.ts';

// A claim is bounded in bytes as well as rows: 500 rows of large events would otherwise sit in the relay's memory
// at once, maxInFlight times over. A claim that stopped at the byte bound is full: its lane goes again at once,
// not a poll later.
let db: TestDatabase;
let relay: Relay | null = null;
const topic = uniqueTopic('batchbytes');
const EVENTS = 12;
const PAYLOAD_CHARS = 100_000;
const MAX_BATCH_BYTES = 300_000;

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 1);
});

after(async () => {
  await relay?.stop();
  await db.drop();
});

test('a claim holds payload bytes up to maxBatchBytes (at least one row), and a byte-full claim goes on at once', {
  timeout: 60_000,
}, async () => {
  const events = Array.from({ length: EVENTS }, (_, i) => ({
    event_type: 'Large',
    aggregate_id: 'large-1',
    aggregate_version: i + 1,
    data: { v: i + 1, blob: 'x'.repeat(PAYLOAD_CHARS) },
  }));
  await db.sql.begin((tx) => enqueueMany(tx, events, { topic, producer: 'batch-bytes-test' }));
  const options = resolveRelayOptions({ maxBatchBytes: MAX_BATCH_BYTES, pollMs: 60_000 });
  const kafka = new KafkaPublisher({ brokers: stack.KAFKA_BROKERS.split(','), clientId: 'postbox-batch-bytes-test' });
  // The real publisher, watched: each call's size is what one claim held.
  const sends: Array<{ count: number; bytes: number }> = [];
  const publisher: Publisher = {
    publish: (messages, publishOptions) => {
      sends.push({ count: messages.length, bytes: messages.reduce((n, m) => n + m.value.length, 0) });
      return kafka.publish(messages, publishOptions);
    },
    close: () => kafka.close(),
  };
  relay = new Relay({ sql: db.sql, executor: inlineExecutor({ sql: db.sql, publisher, options }), options });
  const started = Date.now();
  await relay.start();
  const records = await readTopic(topic, (r) => r.length >= EVENTS, 30_000);
  const waited = Date.now() - started;

  assert.deepEqual(
    records.map((r) => Number(r.headers.ce_aggregateversion)),
    events.map((e) => e.aggregate_version),
    'every event once, in version order',
  );
  const largest = Math.max(...sends.map((s) => s.bytes));
  assert.ok(largest < MAX_BATCH_BYTES + PAYLOAD_CHARS + 1000, `largest send ${largest} B, bound ${MAX_BATCH_BYTES} B`);
  // ~100 kB rows: the bytes before the 4th reach the bound, so a claim holds three.
  assert.ok(
    sends.length >= EVENTS / 3 && sends.every((s) => s.count >= 1 && s.count <= 3),
    `rows per claim: ${sends.map((s) => s.count).join(', ')}`,
  );
  assert.ok(waited < options.pollMs / 2, `all published ${waited} ms after start, not a poll per claim later`);
});
