import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Sql } from '@postbox/engine';
import { KafkaOffsets } from '@postbox/engine/kafka';
import { resolveRetentionPolicy, runRetention, type RetentionReport } from '@postbox/engine/retention';
import { readArchiveIds } from '../support/archive-csv.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { shortPartitions } from '../support/partitions.ts';
import { Pipeline, stopGracefully } from '../support/pipeline.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// Retention while the pipeline runs (issue 23): partitions of 2 s, windows of seconds, a writer, a relay and a
// consumer running while retention runs again and again, as the daily run would on a clock a thousand times
// faster. Partitions are detached, archived and dropped under the roles' feet; nothing may be lost or applied
// twice, no unpublished row may leave with its partition, and every row written is either still in its table or
// in exactly one verified archive. The inbox window passes the broker check for real: the topic keeps its records
// for 2 s + a 2 s segment, the inbox window is 6 s.
const PERIOD_S = 2;
const RUN_MS = 18_000;
const SECOND = 1 / 86_400;

let db: TestDatabase;
let archiveDir: string;
let pipeline: Pipeline | null = null;

before(async () => {
  db = await freshDatabase();
  archiveDir = await mkdtemp(join(tmpdir(), 'postbox-archive-'));
});

after(async () => {
  await pipeline?.stopAll();
  await db?.drop();
  await rm(archiveDir, { recursive: true, force: true });
});

/** Every event id of a table: the rows still in it and those in the archives of its dropped partitions. */
async function rowsAndArchives(
  sql: Sql,
  table: string,
  where: string,
): Promise<{ live: string[]; archived: string[] }> {
  const live = await sql<{ id: string }[]>`SELECT event_id::text AS id FROM ${sql(table)} WHERE ${sql.unsafe(where)}`;
  const archived: string[] = [];
  const dropped = await sql<{ archive_path: string; rows: string }[]>`
    SELECT archive_path, rows::text FROM retention_partition WHERE table_name = ${table} AND state = 'dropped'`;
  for (const p of dropped) {
    const { ids } = await readArchiveIds(p.archive_path);
    assert.equal(ids.length, Number(p.rows), `${p.archive_path}: the ledger's row count`);
    archived.push(...ids);
  }
  return { live: live.map((r) => r.id), archived };
}

function assertOnce(ids: string[], expected: Set<string>, what: string): void {
  const seen = new Set<string>();
  const twice = ids.filter((id) => seen.has(id) || !seen.add(id));
  assert.deepEqual(twice, [], `${what}: no row both kept and archived, or archived twice`);
  const missing = [...expected].filter((id) => !seen.has(id));
  assert.deepEqual(missing, [], `${what}: every row kept or archived`);
}

test('retention runs over and over while a writer, a relay and a consumer run: partitions leave under load, nothing is lost, applied twice or archived twice', {
  timeout: 300_000,
}, async () => {
  await shortPartitions(db.sql, PERIOD_S);
  const topic = uniqueTopic('retlive');
  await createTopic(topic, 3, { 'retention.ms': '2000', 'segment.ms': '2000' });
  const p = (pipeline = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: stack.KAFKA_BROKERS,
    redisUrl: stack.REDIS_URL,
    topic,
    partitions: 3,
    consumer: `live${topic.slice(-6)}`,
    env: { POSTBOX_PARTITION_PERIOD_S: String(PERIOD_S), POSTBOX_PARTITION_AHEAD: '10' },
  }));
  await p.setup();
  const writer = p.writer({ WRITER_RATE: '60', WRITER_AGGREGATES: '25' });
  p.relay();
  p.consumer();
  // The inbox check reads the topics of registered consumers: wait for this one, so the check is not vacuous.
  await waitFor(
    'the consumer to register its topic',
    async () => (await db.sql`SELECT 1 FROM consumer_registry WHERE ${topic} = ANY(topics)`).length > 0,
    60_000,
    200,
  );

  const policy = resolveRetentionPolicy({ archiveDir, outboxDays: 4 * SECOND, inboxDays: 6 * SECOND });
  const offsets = new KafkaOffsets({ brokers: stack.KAFKA_BROKERS.split(',') });
  const reports: RetentionReport[] = [];
  try {
    const until = Date.now() + RUN_MS;
    while (Date.now() < until) {
      reports.push(
        await runRetention(db.sql, {
          policy,
          trigger: 'cli',
          actor: 'retention-live-test',
          brokerRetention: (topics) => offsets.retention(topics),
          lockTimeoutMs: 200,
        }),
      );
      await sleep(1000);
    }
    await stopGracefully(writer, 'writer', 'writer started');
    await p.settle(120_000, { stuckAfterMs: 30_000 });
    // One more run once everything is published and consumed: the last closed partitions may go too.
    await sleep(PERIOD_S * 1000);
    reports.push(await runRetention(db.sql, { policy, trigger: 'cli', actor: 'retention-live-test' }));
  } finally {
    await offsets.close();
  }

  const dropped = (table: string) =>
    reports.flatMap((r) => r.partitions).filter((x) => x.table === table && x.outcome === 'dropped' && x.rows > 0);
  assert.ok(
    dropped('message_outbox').length >= 3,
    `outbox partitions with rows dropped: ${dropped('message_outbox').length}`,
  );
  assert.ok(
    dropped('message_inbox').length >= 2,
    `inbox partitions with rows dropped: ${dropped('message_inbox').length}`,
  );
  const [failed] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM retention_run WHERE status IN ('failed', 'refused')`;
  assert.equal(failed!.n, 0, 'no run failed or was refused');

  // Every event the writer committed was applied exactly once, in each aggregate's order.
  const applied = await db.sql<{ aggregate_id: string; versions: string[]; ids: string[] }[]>`
    SELECT aggregate_id, array_agg(version::text ORDER BY seq) AS versions, array_agg(event_id::text ORDER BY seq) AS ids
    FROM test_applied WHERE consumer = ${p.o.consumer} GROUP BY aggregate_id`;
  const heads = new Map(
    (await db.sql<{ id: string; version: string }[]>`SELECT id, version::text FROM fault_aggregate`).map((r) => [
      r.id,
      Number(r.version),
    ]),
  );
  assert.equal(applied.length, heads.size, 'every aggregate applied');
  const events = new Set<string>();
  for (const a of applied) {
    const expected = Array.from({ length: heads.get(a.aggregate_id)! }, (_, i) => String(i + 1));
    assert.deepEqual(a.versions, expected, `${a.aggregate_id}: versions 1..head, once each, in order`);
    for (const id of a.ids) events.add(id);
  }
  assert.ok(events.size > (RUN_MS / 1000) * 30, `${events.size} events went through`);

  // Outbox and inbox: each event kept or archived, exactly once; what is still kept is recent.
  const outbox = await rowsAndArchives(db.sql, 'message_outbox', 'true');
  assertOnce([...outbox.live, ...outbox.archived], events, 'outbox');
  assert.equal(outbox.live.length + outbox.archived.length, events.size, 'the outbox holds no other event');
  const inbox = await rowsAndArchives(db.sql, 'message_inbox', `consumer_name = '${p.o.consumer}'`);
  assertOnce([...inbox.live, ...inbox.archived], events, 'inbox');
  assert.ok(
    outbox.archived.length > events.size / 3,
    `${outbox.archived.length} of ${events.size} outbox rows archived`,
  );
  const [defaults] = await db.sql<{ n: number }[]>`
    SELECT ((SELECT count(*) FROM message_outbox_p_default) + (SELECT count(*) FROM message_inbox_p_default))::int AS n`;
  assert.equal(defaults!.n, 0, 'no row fell into a default partition');
});
