import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Kafka, logLevel } from 'kafkajs';
import { enqueueMany, type EventInput } from '@postbox/engine';
import { appliedSequences, ceRecord, produce, type RawRecord } from '../support/consumer.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { Pipeline, recordScenario } from '../support/pipeline.ts';
import { stack } from '../support/stack.ts';

// Hostile input, each ending in its stated outcome with the partition still flowing, and the verifier's final
// check. Covered elsewhere, not repeated here: non-JSON, non-UTF-8, invalid envelopes, unknown schema versions,
// key ≠ aggregate id, over maxEventBytes and a handler's PermanentError (consumer/consumer.poison.test.ts, which
// ends with the verifier too); oversize and invalid events at enqueue (outbox/outbox.transaction.test.ts); a
// handler that always throws until its retry budget is spent (retry/retry.consumer.test.ts); a malformed
// traceparent at enqueue (telemetry/telemetry.trace-links.test.ts).
let db: TestDatabase;
const pipelines: Pipeline[] = [];

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  for (const p of pipelines) await p.stopAll();
  await db?.drop();
});

async function pipelineFor(name: string, partitions: number, extra: Record<string, string> = {}): Promise<Pipeline> {
  const topic = uniqueTopic(name);
  await createTopic(topic, partitions);
  const p = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: stack.KAFKA_BROKERS,
    redisUrl: stack.REDIS_URL,
    topic,
    partitions,
    consumer: `${name}${topic.slice(-6)}`,
    env: extra,
  });
  pipelines.push(p);
  await p.setup();
  return p;
}

function healthy(prefix: string, aggregates: number, versions: number): RawRecord[] {
  const out: RawRecord[] = [];
  for (let v = 1; v <= versions; v++)
    for (let a = 0; a < aggregates; a++) out.push(ceRecord({ aggregate_id: `${prefix}-${a}`, version: v }));
  return out;
}

test('the same event_id with another payload is a conflict in the failure store, never absorbed as a duplicate; true duplicates are', async () => {
  // One partition: which delivery of an id comes first is then the log's order (across partitions it is not
  // defined, and whichever comes first is the one taken in — with two, c-2's record sometimes won).
  const p = await pipelineFor('conflict', 1);
  const original = ceRecord({ aggregate_id: 'c-1', version: 1, data: { amount: 10 } });
  const id = original.headers.ce_id!;
  const otherData = ceRecord({ aggregate_id: 'c-1', version: 1, event_id: id, data: { amount: 99 } });
  const otherAggregate = ceRecord({ aggregate_id: 'c-2', version: 1, event_id: id, data: { amount: 10 } });
  const records = [
    ...healthy('ok', 10, 1),
    original,
    { ...original }, // the same bytes again: a duplicate
    otherData,
    otherAggregate,
    ceRecord({ aggregate_id: 'c-1', version: 2 }),
    ...healthy('ok', 10, 2).slice(10),
  ];
  await produce(p.o.topic, records);
  p.consumer();
  const report = await p.settle(90_000);
  const c = report.consumers[0]!;
  assert.equal(c.conflicts, 1, 'the event id with two contents is reported as one conflict');
  assert.equal(c.conflictsUnreported.count, 0);
  assert.ok(c.duplicatesAbsorbed >= 1, 'the byte-identical copy was absorbed as a duplicate');
  // One open failure per event id: both conflicting deliveries are on it (attempts), with the bytes of one.
  const failures = await p.sql<{ event_id: string; error_code: string; payload: Buffer; attempts: number }[]>`
    SELECT event_id, error_code, payload, attempts FROM message_failure WHERE consumer_name = ${p.o.consumer}`;
  assert.deepEqual(
    failures.map((f) => [f.event_id, f.error_code, f.attempts]),
    [[id, 'event_id_conflict', 2]],
  );
  assert.ok(
    failures[0]!.payload.equals(otherData.value!) || failures[0]!.payload.equals(otherAggregate.value!),
    'conflicting bytes are kept',
  );
  const seq = await appliedSequences(p.sql, p.o.consumer);
  assert.deepEqual(seq.get('c-1'), [1, 2], 'c-1 applied once per version, with the first content');
  assert.equal(seq.get('c-2'), undefined, 'the reused id under another aggregate was not applied');
  const [amount] = await p.sql<
    { data: string }[]
  >`SELECT count(*)::text AS data FROM test_applied WHERE event_id = ${id}`;
  assert.equal(amount!.data, '1');
  for (let a = 0; a < 10; a++) assert.deepEqual(seq.get(`ok-${a}`), [1, 2]);
  recordScenario({ scenario: 'bad-input.conflict', iterations: 1, report });
});

test('an event the broker refuses as too large fails alone (a batch too large together is split): its neighbours are published, the partition flows', async () => {
  const p = await pipelineFor('bigbroker', 2);
  // The topic's limit is below the relay's (1 MiB + 64 KiB), so the broker is the one that refuses.
  const admin = new Kafka({
    clientId: 'bad-input-admin',
    brokers: stack.KAFKA_BROKERS.split(','),
    logLevel: logLevel.NOTHING,
  }).admin();
  await admin.connect();
  await admin.alterConfigs({
    validateOnly: false,
    resources: [{ type: 2, name: p.o.topic, configEntries: [{ name: 'max.message.bytes', value: '20000' }] }],
  });
  await admin.disconnect();
  const events: EventInput[] = [];
  for (let v = 1; v <= 3; v++) {
    // 6 KB each: a lane's batch of them is over the topic's limit together (the broker refuses the request).
    for (let a = 0; a < 20; a++)
      events.push({
        event_type: 'FaultEvent',
        aggregate_id: `n-${a}`,
        aggregate_version: v,
        data: { v, pad: 'n'.repeat(6000) },
      });
    if (v <= 2)
      events.push({
        event_type: 'FaultEvent',
        aggregate_id: 'big-1',
        aggregate_version: v,
        data: v === 1 ? { blob: 'x'.repeat(60_000) } : { v },
      });
  }
  await p.sql.begin((tx) => enqueueMany(tx, events, { topic: p.o.topic, producer: 'fault-test' }));
  p.relay();
  p.consumer();
  const report = await p.settle(90_000);
  const rows = await p.sql<
    { aggregate_id: string; aggregate_version: string; status: string; last_error: string | null }[]
  >`
    SELECT aggregate_id, aggregate_version::text, status, last_error FROM message_outbox WHERE status <> 'published'`;
  assert.equal(rows.length, 1, `only the oversize event is not published: ${JSON.stringify(rows)}`);
  assert.equal(rows[0]!.aggregate_id, 'big-1');
  assert.equal(rows[0]!.status, 'failed');
  assert.match(rows[0]!.last_error!, /^kafka_message_too_large \(permanent/);
  const c = report.consumers[0]!;
  assert.equal(c.relayFailed, 1);
  assert.equal(c.blocked, 1, 'big-1 v2 waits behind the failed v1 (its home: the failed outbox row)');
  assert.equal(c.applied, 60);
  recordScenario({ scenario: 'bad-input.oversize-at-broker', iterations: 1, report });
});

test('a handler that hangs (outside or inside the database) is cut off at handlerTimeoutMs, retried, then failed; its neighbours flow', async () => {
  const p = await pipelineFor('hang', 2);
  const records = [
    ...healthy('ok', 15, 1),
    ceRecord({ aggregate_id: 'h-js', version: 1, data: { hangMs: 3_600_000 } }),
    ceRecord({ aggregate_id: 'h-sql', version: 1, data: { hangSql: true } }),
    ...healthy('ok', 15, 2).slice(15),
    ceRecord({ aggregate_id: 'h-js', version: 2 }),
    ceRecord({ aggregate_id: 'h-sql', version: 2 }),
    ...healthy('ok', 15, 3).slice(30),
  ];
  await produce(p.o.topic, records);
  const started = Date.now();
  p.consumer({ TEST_LIMITS: JSON.stringify({ threads: 1, maxBatchEvents: 50, handlerTimeoutMs: 1500 }) });
  const report = await p.settle(90_000);
  const failures = await p.sql<{ aggregate_id: string; error_code: string; attempts: number }[]>`
    SELECT aggregate_id, error_code, attempts FROM message_failure WHERE consumer_name = ${p.o.consumer} ORDER BY aggregate_id`;
  assert.deepEqual(
    failures.map((f) => f.aggregate_id),
    ['h-js', 'h-sql'],
  );
  for (const f of failures) {
    assert.ok(['handler_timeout', 'pg_57014'].includes(f.error_code), `${f.aggregate_id}: ${f.error_code}`);
    assert.equal(f.attempts, 2, 'the retry budget (2 attempts) was spent');
  }
  const seq = await appliedSequences(p.sql, p.o.consumer);
  for (let a = 0; a < 15; a++) assert.deepEqual(seq.get(`ok-${a}`), [1, 2, 3]);
  const c = report.consumers[0]!;
  assert.equal(c.failed, 2);
  assert.equal(c.blocked, 2, 'the v2 of each hung aggregate is parked behind its failure');
  console.log(`# hanging handlers settled in ${Math.round((Date.now() - started) / 1000)} s`);
  recordScenario({ scenario: 'bad-input.hanging-handler', iterations: 1, report });
});

test('a malformed traceparent or tracestate on a record never makes it poison: applied, the trace context left out', async () => {
  const p = await pipelineFor('trace', 1);
  const records = [
    ceRecord({ aggregate_id: 't-1', version: 1, headers: { traceparent: 'zz-not-a-trace-context' } }),
    ceRecord({
      aggregate_id: 't-1',
      version: 2,
      headers: { traceparent: `00-${'0'.repeat(32)}-${'0'.repeat(16)}-01` },
    }),
    ceRecord({ aggregate_id: 't-2', version: 1, headers: { tracestate: 'a=b\u0001c' } }),
    ...healthy('ok', 5, 2),
  ];
  await produce(p.o.topic, records);
  p.consumer();
  const report = await p.settle(60_000);
  const c = report.consumers[0]!;
  assert.equal(c.failed, 0);
  assert.equal(c.applied, records.length);
  recordScenario({ scenario: 'bad-input.traceparent', iterations: 1, report });
});
