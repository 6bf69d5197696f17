import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { enqueueMany, EnvelopeValidationError } from '@postbox/engine';
import { appliedSequences, createHandlerTables, RECORDING_HANDLER, startTestConsumer } from '../support/consumer.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { allPublished, startTestRelay } from '../support/relay.ts';

// Tenants (issue 24): an event written with `tenant` carries it through the outbox and the relay as its `tenant`
// attribute; a consumer that names its tenants applies theirs and stores every other event — another tenant's,
// or one naming none — as a permanent failure `tenant_refused`, never applied, its aggregate blocked.
let db: TestDatabase;
const topic = uniqueTopic('tenant');

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 2);
  await createHandlerTables(db.sql);
});

after(async () => {
  await db.drop();
});

test('a consumer naming its tenant applies its events only; the others are tenant_refused failures', async () => {
  const events = [
    ...[1, 2, 3].map((v) => ({ aggregate_id: 'acme-1', aggregate_version: v, tenant: 'acme' })),
    ...[1, 2].map((v) => ({ aggregate_id: 'globex-1', aggregate_version: v, tenant: 'globex' })),
    { aggregate_id: 'nobody-1', aggregate_version: 1 },
  ];
  await db.sql.begin((tx) =>
    enqueueMany(
      tx,
      events.map((e) => ({ ...e, event_type: 'TestEvent', data: { v: e.aggregate_version } })),
      { topic, producer: 'tenant-test' },
    ),
  );
  const relay = await startTestRelay(db.sql);
  try {
    await allPublished(db.sql, topic, events.length);
  } finally {
    await relay.stop();
  }
  const consumer = await startTestConsumer(db.url, {
    name: 'tenanted',
    topics: [topic],
    handler: RECORDING_HANDLER,
    tenants: ['acme'],
  });
  try {
    await waitFor(
      'every event settled',
      async () => {
        const s = consumer.stats();
        return s.applied + s.failed + s.parked >= events.length;
      },
      40_000,
    );
  } finally {
    await consumer.stop();
  }
  const applied = await appliedSequences(db.sql, 'tenanted');
  assert.deepEqual([...applied.entries()], [['acme-1', [1, 2, 3]]], "only acme's events applied");
  const failures = await db.sql<{ aggregate_id: string; error_code: string; error_detail: string }[]>`
    SELECT aggregate_id, error_code, error_detail FROM message_failure WHERE consumer_name = 'tenanted' ORDER BY aggregate_id, aggregate_version`;
  assert.deepEqual(
    failures.map((f) => [f.aggregate_id, f.error_code]),
    [
      ['globex-1', 'tenant_refused'],
      ['globex-1', 'tenant_refused'],
      ['nobody-1', 'tenant_refused'],
    ],
    "each of the other tenants' events is refused",
  );
  assert.match(failures[0]!.error_detail, /tenant "globex" is not one this consumer takes \("acme"\)/);
  assert.match(failures[2]!.error_detail, /names no tenant/);
});

test('a tenant given twice, differently, is refused at enqueue: nothing written', async () => {
  await assert.rejects(
    db.sql.begin((tx) =>
      enqueueMany(
        tx,
        [
          {
            event_type: 'TestEvent',
            aggregate_id: 'acme-2',
            aggregate_version: 1,
            data: {},
            tenant: 'acme',
            extensions: { tenant: 'globex' },
          },
        ],
        { topic, producer: 'tenant-test' },
      ),
    ),
    (e: unknown) =>
      e instanceof EnvelopeValidationError && /tenant: is "acme" but extensions.tenant is "globex"/.test(e.message),
  );
  const [row] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_outbox WHERE aggregate_id = 'acme-2'`;
  assert.equal(row!.n, 0);
});
