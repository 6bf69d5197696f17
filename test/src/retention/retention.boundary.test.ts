import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { enqueue, type Sql } from '@postbox/engine';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { shortPartitions } from '../support/partitions.ts';
import { Pipeline, stopGracefully } from '../support/pipeline.ts';
import { stack } from '../support/stack.ts';

// Partition boundaries crossed under load (ADR 0009): partitions of 2 s, made ahead by the relay and the consumer
// processes themselves, a writer, a relay and a consumer running for RUN_MS. Nothing may be lost, applied twice or
// out of order across a boundary; the rows spread over the partitions and none fall into the default; and a
// redelivery of the whole topic afterwards — events whose inbox rows sit in partitions long closed, an id exactly
// at a bound, one a millisecond before it, and an old one in the default partition — is all duplicates.
const PERIOD_S = 2;
const RUN_MS = 16_000;

let db: TestDatabase;
let pipeline: Pipeline | null = null;

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  await pipeline?.stopAll();
  await db?.drop();
});

/** The smallest v7 id of a millisecond, and the largest id of the millisecond before it (the SQL's bounds). */
async function idsAround(sql: Sql, at: Date): Promise<{ bound: string; before: string }> {
  const [row] = await sql<{ bound: string; before: string }[]>`
    SELECT postbox_uuid_floor(${at})::text AS bound,
           overlay(postbox_uuid_floor(${new Date(at.getTime() - 1)})::text PLACING '7fff-bfff-ffffffffffff' FROM 15)
             AS before`;
  return row!;
}

test(`a pipeline running across ${RUN_MS / 1000 / PERIOD_S} partition boundaries loses nothing, applies nothing twice, keeps order, and dedups a full redelivery`, {
  timeout: 300_000,
}, async () => {
  await shortPartitions(db.sql, PERIOD_S);
  const topic = uniqueTopic('boundary');
  await createTopic(topic, 3);
  const p = (pipeline = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: stack.KAFKA_BROKERS,
    redisUrl: stack.REDIS_URL,
    topic,
    partitions: 3,
    consumer: `bound${topic.slice(-6)}`,
    env: { POSTBOX_PARTITION_PERIOD_S: String(PERIOD_S), POSTBOX_PARTITION_AHEAD: '10' },
  }));
  await p.setup();
  const writer = p.writer({ WRITER_RATE: '80', WRITER_AGGREGATES: '30' });
  p.relay();
  const consumer = p.consumer();

  // Events with ids at the edges: exactly a future bound, the last id before it, and one of a year ago (default).
  const edge = new Date(Math.ceil((Date.now() + 4000) / (PERIOD_S * 1000)) * PERIOD_S * 1000);
  const { bound, before: justBefore } = await idsAround(db.sql, edge);
  const old = (await idsAround(db.sql, new Date(Date.now() - 365 * 86_400_000))).bound;
  await sleep(edge.getTime() - Date.now() + 500);
  await db.sql.begin(async (tx) => {
    let v = 0;
    for (const id of [justBefore, bound, old])
      await enqueue(
        tx,
        {
          event_id: id,
          event_type: 'EdgeEvent',
          aggregate_id: `${p.o.consumer}-edge`,
          aggregate_version: ++v,
          data: {},
        },
        { topic, producer: 'boundary-test' },
      );
  });
  await sleep(RUN_MS);
  await stopGracefully(writer, 'writer', 'writer started');
  await p.settle(120_000, { stuckAfterMs: 30_000 });

  const placed = await db.sql<{ id: string; partition: string }[]>`
    SELECT event_id::text AS id, tableoid::regclass::text AS partition FROM message_outbox
    WHERE event_id IN (${justBefore}, ${bound}, ${old})`;
  const where = Object.fromEntries(placed.map((r) => [r.id, r.partition]));
  assert.notEqual(where[justBefore], where[bound], 'the ids either side of a bound are in two partitions');
  assert.equal(where[old], 'message_outbox_p_default', 'an id older than every range is in the default partition');
  const [spread] = await db.sql<{ outbox: number; inbox: number; in_default: number }[]>`
    SELECT (SELECT count(DISTINCT tableoid) FROM message_outbox)::int AS outbox,
           (SELECT count(DISTINCT tableoid) FROM message_inbox)::int AS inbox,
           (SELECT count(*) FROM message_outbox_p_default WHERE event_id <> ${old})::int AS in_default`;
  assert.ok(spread!.outbox >= RUN_MS / 1000 / PERIOD_S - 1, `outbox rows in ${spread!.outbox} partitions`);
  assert.ok(spread!.inbox >= RUN_MS / 1000 / PERIOD_S - 1, `inbox rows in ${spread!.inbox} partitions`);
  assert.equal(spread!.in_default, 0, 'the processes kept the partitions made ahead: no row fell into the default');

  // The whole topic again: every event a duplicate, whichever partition its inbox row is in.
  const inbox = await p.redeliverAll(consumer);
  assert.equal(inbox.after, inbox.before, 'no new inbox row: the redelivery was all duplicates');
  const [after] = await db.sql<{ edges: number }[]>`
    SELECT count(*) FILTER (WHERE event_id IN (${justBefore}, ${bound}, ${old}) AND duplicate_deliveries > 0)::int AS edges
    FROM message_inbox WHERE consumer_name = ${p.o.consumer}`;
  assert.equal(after!.edges, 3, 'the edge events came again and were absorbed');
});
