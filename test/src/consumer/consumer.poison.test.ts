import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import {
  appliedSequences,
  ceRecord,
  createHandlerTables,
  produce,
  RECORDING_HANDLER,
  startTestConsumer,
  type RawRecord,
} from '../support/consumer.ts';
import { assertVerified, verifyTestConsumer } from '../support/verified.ts';
import { stack } from '../support/stack.ts';

let db: TestDatabase;
const topic = uniqueTopic('poison');
const HEALTHY = 30;

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 4);
  await createHandlerTables(db.sql);
});

after(async () => {
  await db.drop();
});

function poisoned(aggregate: string, change: (r: RawRecord) => void): RawRecord {
  const r = ceRecord({ aggregate_id: aggregate, version: 1 });
  change(r);
  return r;
}

test('poison messages of each kind land in the failure store with their raw bytes, block their aggregate, and never stop the partition', async () => {
  const poison: Array<[string, string, RawRecord]> = [
    ['p-notjson', 'not_json', poisoned('p-notjson', (r) => (r.value = Buffer.from('{"not": json')))],
    ['p-notutf8', 'not_utf8', poisoned('p-notutf8', (r) => (r.value = Buffer.from([0x7b, 0xff, 0xfe, 0x7d])))],
    ['p-envelope', 'envelope_invalid', poisoned('p-envelope', (r) => (r.headers.ce_id = 'not-a-uuid'))],
    ['p-schema', 'unknown_schema_version', poisoned('p-schema', (r) => (r.headers.ce_schemaversion = '7'))],
    [
      'p-oversize',
      'event_too_large',
      poisoned('p-oversize', (r) => (r.value = Buffer.from(JSON.stringify({ blob: 'x'.repeat(1_200_000) })))),
    ],
    ['p-key', 'key_mismatch', poisoned('p-key', (r) => (r.key = 'p-key-other'))],
    ['p-perm', 'test_poison', ceRecord({ aggregate_id: 'p-perm', version: 2, data: { poison: true } })],
  ];
  const records: RawRecord[] = [ceRecord({ aggregate_id: 'p-perm', version: 1 })];
  for (let v = 1; v <= 3; v++) {
    for (let a = 0; a < HEALTHY; a++) records.push(ceRecord({ aggregate_id: `ok-${a}`, version: v }));
    if (v === 1) records.push(...poison.map(([, , r]) => r));
    if (v === 2)
      for (const [agg] of poison) if (agg !== 'p-perm') records.push(ceRecord({ aggregate_id: agg, version: 2 }));
    if (v === 3) for (const [agg] of poison) records.push(ceRecord({ aggregate_id: agg, version: 3 }));
  }
  await produce(topic, records, 50);
  const consumer = await startTestConsumer(db.url, { name: 'poison', topics: [topic], handler: RECORDING_HANDLER });
  const settled = () => {
    const s = consumer.stats();
    return s.applied + s.duplicates + s.ignored + s.parked + s.failed;
  };
  try {
    await waitFor('every record settled', async () => settled() === records.length, 40_000).catch((e: unknown) => {
      throw new Error(`${(e as Error).message}: ${JSON.stringify(consumer.stats())}`);
    });
  } finally {
    await consumer.stop();
  }
  const stats = consumer.stats();
  assert.equal(stats.failed, poison.length);

  const sequences = await appliedSequences(db.sql, 'poison');
  for (let a = 0; a < HEALTHY; a++) assert.deepEqual(sequences.get(`ok-${a}`), [1, 2, 3], `ok-${a} fully applied`);
  assert.deepEqual(sequences.get('p-perm'), [1], 'p-perm applied up to the poison pill');

  const failures = await db.sql<
    {
      aggregate_id: string;
      error_code: string;
      payload: Buffer;
      headers: Record<string, string>;
      attempts: number;
      event_id: string | null;
    }[]
  >`
    SELECT aggregate_id, error_code, payload, headers, attempts, event_id FROM message_failure WHERE consumer_name = 'poison' ORDER BY aggregate_id`;
  assert.equal(failures.length, poison.length);
  for (const [aggregate, code, record] of poison) {
    const f = failures.find((x) => x.aggregate_id === aggregate);
    assert.ok(f, `failure row for ${aggregate}`);
    assert.equal(f.error_code, code, aggregate);
    assert.ok(f.payload.equals(record.value!), `${aggregate}: raw bytes kept`);
    assert.equal(f.headers.id, record.headers.ce_id, `${aggregate}: headers kept (broker-neutral)`);
    assert.equal(f.attempts, 1);
  }
  const blocked = await db.sql<
    { aggregate_id: string }[]
  >`SELECT aggregate_id FROM consumer_blocked_aggregate WHERE consumer_name = 'poison' AND reason = 'failed' ORDER BY 1`;
  assert.deepEqual(
    blocked.map((b) => b.aggregate_id),
    poison.map(([a]) => a).sort(),
  );
  const parked = await db.sql<{ aggregate_id: string; versions: string[] }[]>`
    SELECT aggregate_id, array_agg(aggregate_version ORDER BY aggregate_version)::text[] AS versions FROM message_parked GROUP BY 1 ORDER BY 1`;
  assert.deepEqual(
    parked.map((p) => [p.aggregate_id, p.versions.join(',')]),
    poison.map(([a]) => [a, a === 'p-perm' ? '3' : '2,3']).sort((x, y) => x[0]!.localeCompare(y[0]!)),
    'the blocked aggregates park their later versions',
  );
  // The verifier agrees: every record accounted for (applied, in the failure store — by position for the one
  // without a readable id — or parked behind its failure), nothing lost, doubled or reordered.
  const report = await verifyTestConsumer(db.sql, stack.KAFKA_BROKERS, 'poison', [topic], { final: true });
  assertVerified(report);
  const c = report.consumers[0]!;
  assert.deepEqual(
    { failed: c.failed, blocked: c.blocked, applied: c.applied },
    { failed: poison.length, blocked: 13, applied: HEALTHY * 3 + 1 },
  );
});
