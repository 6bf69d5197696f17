import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Sql } from '@postbox/engine';
import type { Relay } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { writeEvents } from '../support/events.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { allPublished, startTestRelay } from '../support/relay.ts';

// The relay's claim commits without waiting for the WAL flush; every write of an event (enqueue, the mark, a
// reschedule, a failure) and every lane lease commits synchronously, and the claim's setting never leaks into the
// session it ran on. Recorded by statement triggers in this test's database: each write says the commit mode it
// ran under. The relay runs on one connection, and the events are written through it too, so a setting left on
// the session would reach every later statement of the run.
let db: TestDatabase;
let relaySql: Sql | null = null;
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
    CREATE TRIGGER commit_mode AFTER INSERT OR UPDATE ON message_outbox FOR EACH STATEMENT EXECUTE FUNCTION record_commit_mode();
    CREATE TRIGGER commit_mode AFTER INSERT OR UPDATE ON relay_lane FOR EACH STATEMENT EXECUTE FUNCTION record_commit_mode();
  `);
});

after(async () => {
  await relay?.stop();
  await relaySql?.end({ timeout: 5 });
  await db.drop();
});

test("the claim's lease record commits asynchronously; events, their marks and the lane leases stay synchronous", async () => {
  relaySql = connect({ url: db.url, max: 1, applicationName: 'postbox-test-claim-commit' });
  relay = await startTestRelay(relaySql);
  const total = await writeEvents(relaySql, topic, 10, 20, 20);
  await allPublished(db.sql, topic, total);
  await relay.stop();
  relay = null;

  const modes = await db.sql<{ table_name: string; mode: string; n: number }[]>`
    SELECT table_name, mode, count(*)::int AS n FROM commit_modes GROUP BY 1, 2 ORDER BY 1, 2`;
  const count = (table: string, mode: string) => modes.find((m) => m.table_name === table && m.mode === mode)?.n ?? 0;
  // Claims: the lease record alone, without waiting for the flush.
  assert.ok(count('relay_lane_inflight', 'off') > 0, `claims committed asynchronously: ${JSON.stringify(modes)}`);
  // Every statement that wrote an event or changed its row (enqueue, mark), and every lane lease, waited for its flush.
  assert.ok(count('message_outbox', 'on') > 0, `enqueues and marks recorded: ${JSON.stringify(modes)}`);
  assert.equal(count('message_outbox', 'off'), 0, `no event written asynchronously: ${JSON.stringify(modes)}`);
  assert.ok(count('relay_lane', 'on') > 0, `lane leases recorded: ${JSON.stringify(modes)}`);
  assert.equal(count('relay_lane', 'off'), 0, `no lane lease written asynchronously: ${JSON.stringify(modes)}`);
  // The one session every claim ran on kept the server's setting.
  const [session] = await relaySql<{ mode: string }[]>`SELECT current_setting('synchronous_commit') AS mode`;
  assert.equal(session!.mode, 'on');
});
