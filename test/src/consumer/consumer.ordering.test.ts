import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { newEventId } from '@postbox/engine';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import {
  appliedSequences,
  ceRecord,
  createHandlerTables,
  produce,
  RECORDING_HANDLER,
  shuffle,
  startTestConsumer,
} from '../support/consumer.ts';

let db: TestDatabase;
const topic = uniqueTopic('ordering');
const AGGREGATES = 60;
const VERSIONS = 8;
// One aggregate produced newest first: v25 … v2 park, v1 drains them all — across the 9 → 10 boundary, where a
// drain once read parked versions in text order (10 before 4) and stopped.
const LONG = 25;

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 4);
  await createHandlerTables(db.sql);
});

after(async () => {
  await db.drop();
});

test('events of each aggregate produced in shuffled order are applied strictly 1, 2, 3, …; parked ones drained, old versions ignored', async () => {
  const seed = Date.now() % 100_000;
  const events = [];
  for (let a = 0; a < AGGREGATES; a++)
    for (let v = 1; v <= VERSIONS; v++) events.push({ aggregate_id: `agg-${a}`, version: v });
  const long = Array.from({ length: LONG }, (_, i) => ceRecord({ aggregate_id: 'long', version: LONG - i }));
  const shuffled = [...long, ...shuffle(events, seed).map(ceRecord)];
  // Old versions sent again under new event ids (a stale producer): the inbox lets them in, the gate ignores them.
  const stale = Array.from({ length: 20 }, (_, i) =>
    ceRecord({ aggregate_id: `agg-${i}`, version: 1 + (i % 3), event_id: newEventId() }),
  );
  await produce(topic, shuffled);
  const consumer = await startTestConsumer(db.url, {
    name: `ordering-${seed}`,
    topics: [topic],
    handler: RECORDING_HANDLER,
    limits: { maxBatchEvents: 25 },
  });
  try {
    await waitFor(
      'every event applied',
      async () => consumer.stats().applied + consumer.stats().drained === AGGREGATES * VERSIONS + LONG,
      50_000,
    ).catch((e: unknown) => {
      throw new Error(`${(e as Error).message}: ${JSON.stringify(consumer.stats())}`);
    });
    await produce(topic, stale);
    await waitFor('stale versions ignored', async () => consumer.stats().ignored === stale.length, 30_000);
  } finally {
    await consumer.stop();
  }
  const stats = consumer.stats();
  const sequences = await appliedSequences(db.sql, consumer.definition.name);
  assert.equal(sequences.size, AGGREGATES + 1, `seed ${seed}`);
  for (const [aggregate, versions] of sequences) {
    const n = aggregate === 'long' ? LONG : VERSIONS;
    assert.deepEqual(
      versions,
      Array.from({ length: n }, (_, i) => i + 1),
      `${aggregate} applied in order (seed ${seed})`,
    );
  }
  const { parked } = (await db.sql<{ parked: number }[]>`SELECT count(*)::int AS parked FROM message_parked`)[0]!;
  assert.equal(parked, 0, 'nothing left parked');
  assert.ok(
    stats.parked > 0 && stats.drained === stats.parked,
    `parked ${stats.parked} were all drained (${stats.drained})`,
  );
  assert.equal(stats.failed, 0);
  const { bad } = (
    await db.sql<
      { bad: number }[]
    >`SELECT count(*)::int AS bad FROM demo_order_projection WHERE order_id <> 'long' AND (applied_count <> ${VERSIONS} OR version <> ${VERSIONS})`
  )[0]!;
  assert.equal(bad, 0, 'every aggregate projected once per version');
  const { inbox } = (await db.sql<{ inbox: number }[]>`SELECT count(*)::int AS inbox FROM message_inbox`)[0]!;
  assert.equal(
    inbox,
    AGGREGATES * VERSIONS + LONG + stale.length,
    'every event, ignored ones included, is in the inbox',
  );
});
