import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Relay } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { writeEvents } from '../support/events.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { allPublished, startTestRelay } from '../support/relay.ts';

// The relay's claim commits without waiting for the WAL flush; every change to an event's row (the mark, a
// reschedule, a failure) commits synchronously, and the claim's setting never leaks into the pooled session.
// Recorded by statement triggers in this test's database: each write says the commit mode it ran under.
let db: TestDatabase;
let relay: Relay | null = null;
const topic = uniqueTopic('commitmode');

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 3);
  await db.sql.unsafe(`
    CREATE TABLE commit_modes (table_name text NOT NULL, mode text NOT NULL);
    CREATE FUNCTION record_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO commit_modes VALUES (TG_TABLE_NAME, current_setting('synchronous_commit'));
      RETURN NULL;
    END $$;
    CREATE TRIGGER commit_mode AFTER UPDATE ON relay_lane_inflight FOR EACH STATEMENT EXECUTE FUNCTION record_commit_mode();
    CREATE TRIGGER commit_mode AFTER UPDATE ON message_outbox FOR EACH STATEMENT EXECUTE FUNCTION record_commit_mode();
  `);
});

after(async () => {
  await relay?.stop();
  await db.drop();
});

test("the claim's lease record commits asynchronously; marking events published stays synchronous", async () => {
  relay = await startTestRelay(db.sql);
  const total = await writeEvents(db.sql, topic, 10, 20, 20);
  await allPublished(db.sql, topic, total);
  await relay.stop();
  relay = null;

  const modes = await db.sql<{ table_name: string; mode: string; n: number }[]>`
    SELECT table_name, mode, count(*)::int AS n FROM commit_modes GROUP BY 1, 2 ORDER BY 1, 2`;
  const count = (table: string, mode: string) => modes.find((m) => m.table_name === table && m.mode === mode)?.n ?? 0;
  // Claims: the lease record alone, without waiting for the flush.
  assert.ok(count('relay_lane_inflight', 'off') > 0, `claims committed asynchronously: ${JSON.stringify(modes)}`);
  // Every statement that changed an event's row waited for its flush.
  assert.ok(count('message_outbox', 'on') > 0, `marks recorded: ${JSON.stringify(modes)}`);
  assert.equal(
    count('message_outbox', 'off'),
    0,
    `no event's state committed asynchronously: ${JSON.stringify(modes)}`,
  );
  // The pool's sessions kept the server's setting.
  const sessions = await Promise.all(
    Array.from({ length: 4 }, () => db.sql<{ mode: string }[]>`SELECT current_setting('synchronous_commit') AS mode`),
  );
  assert.deepEqual(
    sessions.map(([s]) => s!.mode),
    ['on', 'on', 'on', 'on'],
  );
});
