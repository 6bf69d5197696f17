import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { enqueue, migrate, newEventId, pendingMigrations, type Sql } from '@postbox/engine';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { alive, Pipeline, stopGracefully } from '../support/pipeline.ts';
import { waitFor, type RoleProcess } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// The upgrade of an installation from before time partitioning (migrations 0016 and 0017) while it runs: an
// outbox and an inbox of LEGACY_ROWS rows each, two writers, a relay and a consumer working throughout. The
// migration must lose and duplicate nothing, hold writers up no longer than its lock timeout, keep the send
// order (seq) going on, give every row its (aggregate, version) key, and leave an inbox that still absorbs a
// redelivery of everything consumed before the swap (the dedup key spans the partitions). POSTBOX_TEST_LEGACY_ROWS
// sets the size (1,000,000 for the figure in the note).
const LEGACY_ROWS = Number(process.env.POSTBOX_TEST_LEGACY_ROWS ?? 200_000);
const LOCK_TIMEOUT_MS = 1000;

let db: TestDatabase;
let pipeline: Pipeline | null = null;

before(async () => {
  db = await freshDatabase('pbt', stack.DATABASE_URL, { migrateTo: 15 });
});

after(async () => {
  await pipeline?.stopAll();
  await db?.drop();
});

/** LEGACY_ROWS published outbox rows of the last ~20 minutes (ids of their time) and their inbox rows. */
async function fillLegacy(sql: Sql): Promise<void> {
  await sql`
    INSERT INTO message_outbox (event_id, event_type, schema_version, aggregate_id, aggregate_version, topic, payload,
                                producer, occurred_at, status, published_at)
    SELECT (lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint - 1200000 + g * 1000 / ${LEGACY_ROWS}), 12, '0')
            || '7' || lpad(to_hex(g % 4096), 3, '0') || '8' || lpad(to_hex(g), 15, '0'))::uuid,
           'LegacyEvent', 1, 'legacy-' || (g % 5000), g / 5000 + 1, 'legacy', convert_to(repeat('x', 200), 'UTF8'),
           'legacy', now(), 'published', now()
    FROM generate_series(1, ${LEGACY_ROWS}) AS g`;
  await sql`
    INSERT INTO message_inbox (consumer_name, event_id, aggregate_id, aggregate_version)
    SELECT 'legacy', event_id, aggregate_id, aggregate_version FROM message_outbox WHERE topic = 'legacy'`;
}

/** Small enqueue transactions back to back while the migration runs: the longest one is how long a writer waited. */
function probeWriter(sql: Sql, topic: string): { stop(): Promise<{ longestMs: number; written: number }> } {
  let stopping = false;
  let longestMs = 0;
  let written = 0;
  const loop = (async () => {
    for (let i = 0; !stopping; i++) {
      const started = performance.now();
      await sql.begin((tx) =>
        enqueue(
          tx,
          {
            event_id: newEventId(),
            event_type: 'Probe',
            aggregate_id: `probe-${i}`,
            aggregate_version: 1,
            data: { i },
          },
          { topic, producer: 'probe' },
        ),
      );
      written++;
      longestMs = Math.max(longestMs, performance.now() - started);
      await sleep(10);
    }
  })();
  return {
    async stop() {
      stopping = true;
      await loop;
      return { longestMs, written };
    },
  };
}

test(`an installation with ${LEGACY_ROWS} outbox and inbox rows is partitioned while writers, a relay and a consumer run`, {
  timeout: 600_000,
}, async () => {
  const topic = uniqueTopic('partition');
  await createTopic(topic, 3);
  const p = (pipeline = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: stack.KAFKA_BROKERS,
    redisUrl: stack.REDIS_URL,
    topic,
    partitions: 3,
    consumer: `part${topic.slice(-6)}`,
  }));
  await p.setup();
  await fillLegacy(db.sql);
  const [legacySeq] = await db.sql<{ max: string }[]>`SELECT max(seq)::text AS max FROM message_outbox`;
  const roles: RoleProcess[] = [
    p.writer({ WRITER_RATE: '60', WRITER_AGGREGATES: '40' }),
    p.writer({ WRITER_RATE: '60', WRITER_AGGREGATES: '40', WRITER_PREFIX: `${p.o.consumer}b` }),
    p.relay(),
    p.consumer(),
  ];
  await waitFor(
    'the consumer to apply events before the migration',
    async () =>
      (await db.sql`SELECT 1 FROM message_inbox WHERE consumer_name = ${p.o.consumer} LIMIT 50`).length === 50,
    60_000,
  );

  const probe = probeWriter(db.sql, topic);
  const lines: string[] = [];
  const started = performance.now();
  const pending = (await pendingMigrations(db.sql)).map((f) => f.version);
  const applied = await migrate(db.sql, { lockTimeoutMs: LOCK_TIMEOUT_MS, log: (l) => lines.push(l) });
  const migrationMs = performance.now() - started;
  await sleep(3000);
  const { longestMs, written } = await probe.stop();
  console.log(
    `# migration of ${LEGACY_ROWS} rows: ${Math.round(migrationMs)} ms; the longest writer wait ${Math.round(
      longestMs,
    )} ms over ${written} probe transactions\n# ${lines.join('\n# ')}`,
  );
  assert.deepEqual(applied.slice(0, 2), [16, 17], 'the registry and the conversion, among the rest of the chain');
  assert.deepEqual(applied, pending);
  for (const r of roles)
    assert.ok(alive(r), `${r.child.spawnargs.slice(2).join(' ')} died:\n${r.output().slice(-3000)}`);
  assert.ok(
    longestMs < LOCK_TIMEOUT_MS * 4,
    `a writer waited ${Math.round(longestMs)} ms: longer than the lock timeout allows (${LOCK_TIMEOUT_MS} ms a try)`,
  );

  // Partitioned, the legacy rows in the legacy partitions, nothing lost or doubled.
  const kinds = await db.sql<{ relname: string; relkind: string }[]>`
    SELECT relname, relkind FROM pg_class WHERE relname IN ('message_outbox', 'message_inbox') ORDER BY relname`;
  assert.deepEqual(
    kinds.map((k) => k.relkind),
    ['p', 'p'],
    'both tables are partitioned',
  );
  const [legacy] = await db.sql<{ outbox: number; inbox: number; outbox_old: number; inbox_old: number }[]>`
    SELECT (SELECT count(*) FROM message_outbox WHERE topic = 'legacy')::int AS outbox,
           (SELECT count(*) FROM message_inbox WHERE consumer_name = 'legacy')::int AS inbox,
           (SELECT count(*) FROM message_outbox_p_legacy WHERE topic = 'legacy')::int AS outbox_old,
           (SELECT count(*) FROM message_inbox_p_legacy WHERE consumer_name = 'legacy')::int AS inbox_old`;
  assert.deepEqual(legacy, {
    outbox: LEGACY_ROWS,
    inbox: LEGACY_ROWS,
    outbox_old: LEGACY_ROWS,
    inbox_old: LEGACY_ROWS,
  });

  await stopGracefully(roles[0]!, 'writer', 'writer started');
  await stopGracefully(roles[1]!, 'writer', 'writer started');
  const report = await p.settle(120_000, { stuckAfterMs: 30_000 });
  assert.ok(report.ok);

  const [facts] = await db.sql<
    { rows: number; ids: number; seqs: number; top: string; keys: number; keyless: number }[]
  >`
    SELECT (SELECT count(*) FROM message_outbox)::int AS rows,
           (SELECT count(DISTINCT event_id) FROM message_outbox)::int AS ids,
           (SELECT count(DISTINCT seq) FROM message_outbox)::int AS seqs,
           (SELECT max(seq)::text FROM message_outbox) AS top,
           (SELECT count(*) FROM message_outbox_key)::int AS keys,
           (SELECT count(*) FROM message_outbox o WHERE NOT EXISTS (
              SELECT 1 FROM message_outbox_key k
              WHERE (k.aggregate_id, k.aggregate_version, k.event_id) = (o.aggregate_id, o.aggregate_version, o.event_id)
            ))::int AS keyless`;
  assert.equal(facts!.ids, facts!.rows, 'no event id twice');
  // The send order goes on from where the old table's identity stood: no seq is handed out twice.
  assert.equal(facts!.seqs, facts!.rows, 'no seq twice');
  assert.ok(BigInt(facts!.top) > BigInt(legacySeq!.max), 'the pipeline wrote during and after the migration');
  assert.equal(facts!.keyless, 0, 'every row has its (aggregate, version) key');
  assert.equal(facts!.keys, facts!.rows, 'one key per row');

  // A redelivery of the whole topic after the swap: every event consumed so far is a duplicate, none applied twice.
  const inbox = await p.redeliverAll(roles[3]!);
  assert.equal(inbox.after, inbox.before, 'no new inbox row: the redelivery was all duplicates');
});
