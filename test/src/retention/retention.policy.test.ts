import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// The inbox must outlive the broker's retention (seed §8): a redelivery after its inbox row is gone would be
// applied again. Retention reads each consumed topic's effective retention from Kafka (retention.ms + segment.ms;
// compacted or -1: forever) and refuses a shorter inbox window by name — exit 2, the run recorded as refused,
// nothing detached — until the window covers it.
const DAY = 86_400_000;
let db: TestDatabase;
let archiveDir: string;
const weekly = uniqueTopic('weekly');
const compacted = uniqueTopic('compacted');

before(async () => {
  db = await freshDatabase();
  archiveDir = await mkdtemp(join(tmpdir(), 'postbox-archive-'));
  await createTopic(weekly, 1, { 'retention.ms': String(7 * DAY), 'segment.ms': String(7 * DAY) });
  await createTopic(compacted, 1, { 'cleanup.policy': 'compact' });
});

after(async () => {
  await db.drop();
  await rm(archiveDir, { recursive: true, force: true });
});

function cli(args: string[], env: Record<string, string>) {
  return spawnPostbox(['retention', ...args], {
    DATABASE_URL: db.url,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
    POSTBOX_ARCHIVE_DIR: archiveDir,
    LOG_LEVEL: 'warn',
    ...env,
  });
}

async function register(consumer: string, topic: string): Promise<void> {
  await db.sql`
    INSERT INTO consumer_registry (consumer_name, group_id, topics) VALUES (${consumer}, ${`postbox.${consumer}`}, ${[topic]})`;
}

test('an inbox window shorter than a topic keeps its records is refused by name; long enough, the run goes on', async () => {
  await register('weekly-reader', weekly);
  const asOf = new Date(Date.now() + 40 * DAY).toISOString();
  const refused = cli(['run', '--force', '--as-of', asOf], { POSTBOX_INBOX_RETENTION_DAYS: '3' });
  assert.equal(await refused.exited, 2, refused.output());
  assert.match(refused.output(), new RegExp(`inbox window 3 d < topic ${weekly}: records kept 14 d`));
  assert.match(refused.output(), /POSTBOX_INBOX_RETENTION_DAYS ≥ 14/);
  const plan = cli(['plan', '--as-of', asOf], { POSTBOX_INBOX_RETENTION_DAYS: '3' });
  assert.equal(await plan.exited, 2, plan.output());
  assert.match(plan.output(), /refused/);
  const [runs] = await db.sql<{ refused: number; dropped: number }[]>`
    SELECT (SELECT count(*) FROM retention_run WHERE status = 'refused' AND error LIKE ${`%${weekly}%`})::int AS refused,
           (SELECT count(*) FROM retention_partition)::int AS dropped`;
  assert.deepEqual(runs, { refused: 1, dropped: 0 }, 'recorded, nothing taken out');

  const ok = cli(['run', '--force', '--as-of', asOf], { POSTBOX_INBOX_RETENTION_DAYS: '14' });
  assert.equal(await ok.exited, 0, ok.output());
  const [taken] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM retention_partition WHERE state = 'dropped'`;
  assert.ok(taken!.n > 0, 'the legacy and past partitions left');
});

test('a compacted topic keeps records forever: only an inbox kept forever passes', async () => {
  await register('state-reader', compacted);
  const refused = cli(['plan'], { POSTBOX_INBOX_RETENTION_DAYS: '36500' });
  assert.equal(await refused.exited, 2, refused.output());
  assert.match(refused.output(), new RegExp(`topic ${compacted}: records kept forever \\(cleanup.policy=compact`));
  const ok = cli(['plan'], { POSTBOX_INBOX_RETENTION_DAYS: 'forever' });
  assert.equal(await ok.exited, 0, ok.output());
  assert.match(ok.output(), /message_inbox {2}window forever/);
});
