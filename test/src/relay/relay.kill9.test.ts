import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { checkTopic, writeEvents } from '../support/events.ts';
import { readTopic, uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { outboxCounts } from '../support/relay.ts';
import { stack } from '../support/stack.ts';

let db: TestDatabase;
let relay: RoleProcess | null = null;
const topic = uniqueTopic('kill9');

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  relay?.kill('SIGKILL');
  await db.drop();
});

test('kill -9 of a relay mid-batch: after the lease expires everything is published; duplicates bounded by what was in flight', async () => {
  const env = {
    ...stack,
    DATABASE_URL: db.url,
    POSTBOX_TOPICS: `${topic}:4`,
    POSTBOX_RELAY_THREADS: '1',
    POSTBOX_RELAY_BATCH_SIZE: '200',
    POSTBOX_RELAY_LEASE_MS: '3000',
    POSTBOX_RELAY_LANE_LEASE_MS: '2000',
    LOG_LEVEL: 'warn',
  };
  const total = await writeEvents(db.sql, topic, 100, 60, 1000);
  relay = spawnPostbox(['relay'], env);
  // Catch it with batches claimed and not yet settled.
  const inFlight = await waitFor(
    'a moment with rows both published and in flight',
    async () => {
      const c = await outboxCounts(db.sql);
      return (c.published ?? 0) > 0 && (c.publishing ?? 0) > 0 ? c : undefined;
    },
    60_000,
    5,
  );
  relay.kill('SIGKILL');
  await relay.exited;
  const [atKill] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_outbox_state WHERE status = 'publishing'`;
  assert.ok(atKill!.n > 0, `rows were in flight at the kill (${JSON.stringify(inFlight)})`);
  const [lease] = await db.sql<
    { t: Date }[]
  >`SELECT min(lease_until) AS t FROM message_outbox_state WHERE status = 'publishing'`;

  relay = spawnPostbox(['relay'], env);
  await waitFor(
    'everything published after the restart',
    async () => (await outboxCounts(db.sql)).published === total,
    120_000,
    500,
  );
  assert.deepEqual(await outboxCounts(db.sql), { published: total });
  // The re-sent rows waited for the dead relay's leases: none was published again before the first lease ended.
  const early = await db.sql`SELECT 1 FROM message_outbox WHERE attempts > 1 AND published_at < ${lease!.t}`;
  assert.equal(early.length, 0);

  const records = await readTopic(topic, (r) => new Set(r.map((x) => x.headers.ce_id)).size >= total, 60_000);
  const check = checkTopic(records);
  assert.equal(check.distinct, total, 'nothing lost');
  assert.ok(check.duplicates <= atKill!.n, `duplicates ${check.duplicates} ≤ in flight at the kill ${atKill!.n}`);
  assert.deepEqual(check.outOfOrder, [], 'first deliveries in order per aggregate');
  const [reSent] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_outbox WHERE attempts > 1`;
  assert.ok(reSent!.n <= atKill!.n, `re-sent rows ${reSent!.n} ≤ in flight ${atKill!.n}`);
  console.log(
    `# kill -9: in flight at kill ${atKill!.n}, re-sent ${reSent!.n}, duplicates on topic ${check.duplicates}`,
  );
  relay.kill('SIGTERM');
  assert.equal(await relay.exited, 0);
  relay = null;
});
