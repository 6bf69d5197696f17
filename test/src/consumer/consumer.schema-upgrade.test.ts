import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { Pipeline, stopGracefully } from '../support/pipeline.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// A rolling upgrade across an event schema bump (issue 24, docs/operations.md "Upgrades"): an old consumer
// (schema 1 only) and a new one (1 and 2) run side by side in one group while producers still write 1; the old
// one leaves, producers move to 2. Then the wrong order, on purpose: a producer writes 2 while only an old consumer
// runs — its events become unknown_schema_version failures, never applied, never lost; once a new consumer runs,
// `postbox failures replay` applies them, in order.
let db: TestDatabase;
let pipeline: Pipeline | null = null;
const OLD = { TEST_SCHEMA_VERSIONS: '{}' };
const NEW = { TEST_SCHEMA_VERSIONS: JSON.stringify({ FaultEvent: [1, 2] }) };

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  await pipeline?.stopAll();
  await db?.drop();
});

async function write(p: Pipeline, schemaVersion: number, ms: number): Promise<void> {
  const writer = p.writer({ WRITER_RATE: '40', WRITER_AGGREGATES: '12', WRITER_SCHEMA_VERSION: String(schemaVersion) });
  await sleep(ms);
  await stopGracefully(writer, 'writer', 'writer started');
}

async function failures(sql: TestDatabase['sql'], consumer: string) {
  const [row] = await sql<{ open: number; codes: string[] | null }[]>`
    SELECT count(*) FILTER (WHERE status = 'open')::int AS open, array_agg(DISTINCT error_code) AS codes
    FROM message_failure WHERE consumer_name = ${consumer}`;
  return row!;
}

test('old and new consumers side by side across a schema bump; producers first is caught, kept and replayed', {
  timeout: 300_000,
}, async () => {
  const topic = uniqueTopic('upgrade');
  await createTopic(topic, 4);
  const p = (pipeline = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: stack.KAFKA_BROKERS,
    redisUrl: stack.REDIS_URL,
    topic,
    partitions: 4,
    consumer: `upg${topic.slice(-6)}`,
  }));
  await p.setup();
  p.relay();
  const summary: string[] = [];

  // 1. Consumers first: old and new side by side, producers on schema 1.
  const old = p.consumer(OLD);
  const upgraded = p.consumer(NEW);
  await write(p, 1, 4000);
  await p.settle(120_000, { stuckAfterMs: 30_000 });
  assert.equal((await failures(db.sql, p.o.consumer)).open, 0, 'schema 1 is taken by both');
  summary.push('schema 1 with old + new consumers: all applied, no failure');

  // 2. The old one leaves; producers move to schema 2.
  await stopGracefully(old, 'old consumer');
  await write(p, 2, 3000);
  await p.settle(120_000, { stuckAfterMs: 30_000 });
  assert.equal((await failures(db.sql, p.o.consumer)).open, 0, 'schema 2 is taken by the new consumer');
  summary.push('schema 2 with the new consumer: all applied, no failure');

  // 3. The wrong order: only an old consumer runs while schema 2 is written.
  await stopGracefully(upgraded, 'new consumer');
  const late = p.consumer(OLD);
  await write(p, 2, 2000);
  // Until every event written is refused: the count is there and holds for a second.
  await waitFor(
    'the old consumer to refuse schema 2',
    async () => {
      const before = (await failures(db.sql, p.o.consumer)).open;
      await sleep(1000);
      return before > 0 && (await failures(db.sql, p.o.consumer)).open === before;
    },
    60_000,
    250,
  );
  const refused = await failures(db.sql, p.o.consumer);
  assert.deepEqual(refused.codes, ['unknown_schema_version']);
  const [notApplied] = await db.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM message_failure f JOIN test_applied a ON a.event_id = f.event_id
    WHERE f.consumer_name = ${p.o.consumer}`;
  assert.equal(notApplied!.n, 0, 'a refused event is never applied');
  summary.push(`schema 2 with only an old consumer: ${refused.open} events refused (unknown_schema_version)`);

  // After the upgrade: a new consumer, and the failures replayed.
  await stopGracefully(late, 'old consumer');
  p.consumer(NEW);
  const replay = p.replay({}, ['--limit', '1000']);
  assert.equal(await replay.exited, 0, replay.output());
  assert.match(replay.output(), new RegExp(`${refused.open} replay\\(s\\) scheduled`));
  await waitFor(
    'every refused event replayed',
    async () => (await failures(db.sql, p.o.consumer)).open === 0,
    120_000,
    250,
  );
  const report = await p.settle(120_000, { stuckAfterMs: 30_000 });
  assert.ok(report.ok, JSON.stringify(report.violations));
  summary.push(
    `replayed after the upgrade: the verifier passes (${report.consumers[0]!.applied} events applied once, in order)`,
  );
  console.log(`# rolling upgrade: ${summary.join('; ')}`);
});
