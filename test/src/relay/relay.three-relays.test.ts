import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { checkTopic, writeEvents } from '../support/events.ts';
import { readTopic, uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { outboxCounts } from '../support/relay.ts';
import { stack } from '../support/stack.ts';

let db: TestDatabase;
const relays: RoleProcess[] = [];
const topic = uniqueTopic('three');

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  for (const r of relays) r.kill('SIGKILL');
  await db.drop();
});

test('10,000 events over 200 aggregates through three relay processes: all on the topic, in order per aggregate', async () => {
  const env = {
    ...stack,
    DATABASE_URL: db.url,
    POSTBOX_TOPICS: `${topic}:6`,
    POSTBOX_RELAY_THREADS: '1',
    POSTBOX_RELAY_LANE_LEASE_MS: '3000',
    LOG_LEVEL: 'warn',
  };
  for (let i = 0; i < 3; i++) relays.push(spawnPostbox(['relay'], env));
  // The three relays share the lanes between them before and while the events arrive.
  const owners = await waitFor(
    'three relays to own lanes',
    async () => {
      const rows = await db.sql<{ owners: number; lanes: number }[]>`
      SELECT count(DISTINCT owner)::int AS owners, count(owner)::int AS lanes FROM relay_lane WHERE lease_until > now()`;
      return rows[0]!.owners === 3 && rows[0]!.lanes === 16 ? rows[0] : undefined;
    },
    60_000,
  );
  assert.equal(owners.owners, 3);

  const written = await writeEvents(db.sql, topic, 200, 50, 250);
  assert.equal(written, 10_000);
  await waitFor('every row published', async () => (await outboxCounts(db.sql)).published === 10_000, 120_000, 500);
  assert.deepEqual(await outboxCounts(db.sql), { published: 10_000 });

  const records = await readTopic(topic, (r) => new Set(r.map((x) => x.headers.ce_id)).size >= 10_000, 60_000);
  const check = checkTopic(records);
  assert.equal(check.distinct, 10_000, 'every event is on the topic');
  assert.deepEqual(check.outOfOrder, [], 'per-aggregate order holds on the topic');
  // Every stored broker position names the record that carries that event.
  const byPosition = new Map(records.map((r) => [`${r.partition}/${r.offset}`, r.headers.ce_id]));
  const rows = await db.sql<{ event_id: string; p: number; o: string }[]>`
    SELECT event_id, broker_partition AS p, broker_offset::text AS o FROM message_outbox`;
  const mismatched = rows.filter((r) => byPosition.get(`${r.p}/${r.o}`) !== r.event_id);
  assert.equal(mismatched.length, 0, `positions that do not match the topic: ${mismatched.length}`);

  for (const r of relays) r.kill('SIGTERM');
  const codes = await Promise.all(relays.map((r) => r.exited));
  assert.deepEqual(codes, [0, 0, 0], relays.map((r) => r.output()).join('\n'));
  const [left] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM relay_lane WHERE owner IS NOT NULL`;
  assert.equal(left!.n, 0, 'graceful stop hands every lane back');
  relays.length = 0;
});
