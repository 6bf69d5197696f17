import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { stackStatus, stackUp } from '@postbox/stack';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { checkTopic, writeEvents } from '../support/events.ts';
import { createTopic, readTopic, uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { outboxCounts } from '../support/relay.ts';
import { stack } from '../support/stack.ts';

let db: TestDatabase;
let relay: RoleProcess | null = null;
const topic = uniqueTopic('down');

async function kafkaPid(): Promise<number> {
  const kafka = (await stackStatus()).services.find((s) => s.name === 'kafka');
  assert.ok(kafka?.running && kafka.pid, "this test stops and restarts the local stack's Kafka");
  return kafka.pid;
}

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 3);
});

after(async () => {
  relay?.kill('SIGKILL');
  await stackUp({ quiet: true });
  await db.drop();
});

test('broker unavailable at start and for a while: the relay backs off without a tight loop, then publishes everything', async () => {
  const pid = await kafkaPid();
  process.kill(pid, 'SIGTERM');
  await waitFor(
    'kafka to stop',
    async () => !(await stackStatus()).services.find((s) => s.name === 'kafka')?.running,
    60_000,
  );

  relay = spawnPostbox(['relay'], {
    ...stack,
    DATABASE_URL: db.url,
    POSTBOX_TOPICS: `${topic}:3`,
    POSTBOX_RELAY_THREADS: '1',
    LOG_LEVEL: 'warn',
  });
  const total = await writeEvents(db.sql, topic, 20, 10, 200);
  const downSince = Date.now();
  await new Promise((r) => setTimeout(r, 15_000));
  const whileDown = await outboxCounts(db.sql);
  assert.equal(whileDown.published ?? 0, 0, 'nothing can be published while the broker is down');
  assert.equal(relay.child.exitCode, null, 'the relay keeps running');
  // The start-up topic check retried with backoff: a handful of attempts in 15 s, not thousands.
  const retries = relay
    .output()
    .split('\n')
    .filter((l) => l.includes('kafka not ready')).length;
  assert.ok(retries >= 1 && retries <= 20, `start-up retries while down: ${retries}`);

  await stackUp({ quiet: true });
  await waitFor(
    'everything published after the broker returns',
    async () => (await outboxCounts(db.sql)).published === total,
    120_000,
    500,
  );
  const records = await readTopic(topic, (r) => new Set(r.map((x) => x.headers.ce_id)).size >= total, 60_000);
  const check = checkTopic(records);
  assert.equal(check.distinct, total);
  assert.deepEqual(check.outOfOrder, []);
  console.log(
    `# broker down ${Math.round((Date.now() - downSince) / 1000)} s: ${retries} start-up retries, ${total} events published after`,
  );
});

test('broker lost while publishing: rows back off on available_at with bounded attempts; once it answers, every lane goes at once', async () => {
  const topic2 = uniqueTopic('down2');
  await createTopic(topic2, 3);
  relay?.kill('SIGTERM');
  await relay?.exited;
  relay = spawnPostbox(['relay'], {
    ...stack,
    DATABASE_URL: db.url,
    POSTBOX_TOPICS: `${topic2}:3`,
    POSTBOX_RELAY_THREADS: '1',
    // Backoffs of up to three or four minutes, so that lanes still wait out theirs long after the broker is back:
    // Kafka's restart alone takes 20-40 s here, and with full jitter a first backoff is anywhere in [0, base]. (With
    // a one-minute base, a slow restart left every lane due before the broker answered, and nothing to compare.)
    POSTBOX_RELAY_BACKOFF_BASE_MS: '180000',
    POSTBOX_RELAY_BACKOFF_CAP_MS: '240000',
    LOG_LEVEL: 'warn',
  });
  await waitFor(
    'the relay to own its lanes',
    async () => (await db.sql`SELECT 1 FROM relay_lane WHERE lease_until > now()`).length === 16,
    60_000,
  );

  process.kill(await kafkaPid(), 'SIGTERM');
  await waitFor(
    'kafka to stop',
    async () => !(await stackStatus()).services.find((s) => s.name === 'kafka')?.running,
    60_000,
  );
  const total = await writeEvents(db.sql, topic2, 20, 10, 200, 'lost');
  await new Promise((r) => setTimeout(r, 15_000));
  const [during] = await db.sql<{ max: number; errors: number }[]>`
    SELECT max(attempts)::int AS max, count(*) FILTER (WHERE last_error IS NOT NULL)::int AS errors
    FROM message_outbox WHERE topic = ${topic2}`;
  // Backoffs of minutes: an attempt or two in 15 s; a tight loop would make hundreds.
  assert.ok(during!.max >= 1 && during!.max <= 5, `attempts while down: ${during!.max}`);
  assert.ok(during!.errors > 0, 'the error is recorded on the rows');
  const [err] = await db.sql<
    { last_error: string }[]
  >`SELECT last_error FROM message_outbox WHERE topic = ${topic2} AND last_error IS NOT NULL LIMIT 1`;
  assert.match(err!.last_error, /^kafka_[a-z_]+ \((transient|unknown), attempt \d+\)/);

  // When each row is due, read while the broker is still down: the first lane to retry once it is back finds it
  // answering, and the others must then go at once instead of sitting out what is left of their backoff. (Read
  // after the restart, the rows may already be published, and there would be nothing left to compare.)
  const dueAt = new Map(
    (
      await db.sql<{ event_id: string; available_at: Date }[]>`
        SELECT event_id, available_at FROM message_outbox WHERE topic = ${topic2} AND status = 'pending'`
    ).map((r) => [r.event_id, r.available_at.getTime()]),
  );
  const restartFrom = Date.now();
  await stackUp({ quiet: true });
  const restartMs = Date.now() - restartFrom;
  await waitFor(
    'all published',
    async () => {
      const [r] = await db.sql<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM message_outbox WHERE topic = ${topic2} AND status = 'published'`;
      return r!.n === total;
    },
    120_000,
    500,
  );
  const [errors] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_outbox WHERE topic = ${topic2} AND last_error IS NOT NULL`;
  assert.equal(errors!.n, 0, 'last_error cleared once published');
  const published = await db.sql<{ event_id: string; published_at: Date }[]>`
    SELECT event_id, published_at FROM message_outbox WHERE topic = ${topic2}`;
  const firstBack = Math.min(...published.map((r) => r.published_at.getTime()));
  // Rows whose backoff ran well past the broker's first confirmation: each was sent before its backoff ended.
  const waitedLong = published.filter((r) => (dueAt.get(r.event_id) ?? 0) > firstBack + 5000);
  assert.ok(
    waitedLong.length > 0,
    `some lanes still had a long backoff ahead when the broker answered again (Kafka took ${restartMs} ms to restart; ` +
      `due times ${[...new Set([...dueAt.values()].map((t) => Math.round((t - firstBack) / 1000)))].join(', ')} s from the first publish)`,
  );
  const late = waitedLong.filter((r) => r.published_at.getTime() >= dueAt.get(r.event_id)!);
  assert.deepEqual(late.length, 0, `${late.length} of ${waitedLong.length} rows sat out their backoff`);
  const check = checkTopic(
    await readTopic(topic2, (r) => new Set(r.map((x) => x.headers.ce_id)).size >= total, 60_000),
  );
  assert.equal(check.distinct, total);
  assert.deepEqual(check.outOfOrder, [], 'the lane pause kept per-aggregate order through the retries');
  console.log(
    `# broker lost mid-stream: max attempts ${during!.max} in 15 s, ${total} published after; ${waitedLong.length} rows resumed before their backoff ended`,
  );
  relay.kill('SIGTERM');
  assert.equal(await relay.exited, 0);
  relay = null;
});
