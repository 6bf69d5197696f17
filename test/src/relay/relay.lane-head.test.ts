import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { enqueueMany } from '@postbox/engine';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, readTopic, uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, type RoleProcess } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// A lane's head that is not claimable now — waiting out its backoff, or leased by a claim whose reply was lost —
// holds back the rows behind it: the relay never publishes v2 of an aggregate before its v1 (the fault suite's
// dropped PostgreSQL replies once put an aggregate out of order on the topic this way).
let db: TestDatabase;
let relay: RoleProcess | null = null;
const topic = uniqueTopic('lanehead');

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 1);
});

after(async () => {
  relay?.kill('SIGKILL');
  await db.drop();
});

test('rows behind a lane head that waits (backoff, or a live lease) are not published before it', {
  timeout: 90_000,
}, async () => {
  const events = [1, 2, 3].flatMap((v) =>
    ['lh-1', 'lh-2'].map((a) => ({ event_type: 'LaneHead', aggregate_id: a, aggregate_version: v, data: { v } })),
  );
  await db.sql.begin((tx) => enqueueMany(tx, events, { topic, producer: 'lane-head-test' }));
  // lh-1 v1 waits out a backoff; lh-2 v1 is leased by a claim its relay never heard back from.
  await db.sql`UPDATE message_outbox SET available_at = now() + interval '4 seconds' WHERE aggregate_id = 'lh-1' AND aggregate_version = 1`;
  await db.sql`UPDATE message_outbox SET status = 'publishing', lease_until = now() + interval '4 seconds', lease_owner = 'lost-reply'
               WHERE aggregate_id = 'lh-2' AND aggregate_version = 1`;
  relay = spawnPostbox(['relay'], {
    ...stack,
    DATABASE_URL: db.url,
    POSTBOX_TOPICS: `${topic}:1`,
    POSTBOX_RELAY_THREADS: '0',
    POSTBOX_RELAY_POLL_MS: '100',
    LOG_LEVEL: 'warn',
  });
  const records = await readTopic(topic, (r) => r.length >= events.length, 60_000);
  const order = (a: string) => records.filter((r) => r.key === a).map((r) => Number(r.headers.ce_aggregateversion));
  assert.deepEqual(order('lh-1'), [1, 2, 3], 'behind a backoff');
  assert.deepEqual(order('lh-2'), [1, 2, 3], 'behind a live lease');
});
