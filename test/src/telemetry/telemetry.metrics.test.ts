import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { startTelemetry, type Telemetry } from '@postbox/api';
import { enqueueMany, silentLogger, type EventInput } from '@postbox/engine';
import { PartitionMaintenance, resolvePartitionOptions } from '@postbox/engine/retention';
import type { Relay } from '@postbox/engine/runtime';
import { defineSaga, SagaOrchestrator, SagaTimerRunner } from '@postbox/engine/saga';
import { freePort } from '@postbox/stack';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { ceRecord, produce, resetGroupToEarliest } from '../support/consumer.ts';
import { captureLog, createAppliedTable, startInlineConsumer, startInlineRelay, TRACED_HANDLER } from './support.ts';

// The Prometheus endpoint (POSTBOX_METRICS_PORT) after events flow through a relay and a consumer in this
// process: the names are there and the values are the ones the flow implies — sent = published, applied =
// consumed, a redelivery shows as duplicates, a gap as parked, poison as a failure, a held row as pending.

let telemetry: Telemetry;
let db: TestDatabase;
let relay: Relay;
let port: number;
const topic = uniqueTopic('metrics');
const name = `metrics-${randomBytes(3).toString('hex')}`;
const { log } = captureLog();
let stopConsumer: (() => Promise<void>) | null = null;
const EVENTS = 20;

before(async () => {
  port = await freePort();
  telemetry = await startTelemetry('test', {
    env: { POSTBOX_METRICS_PORT: String(port), POSTBOX_METRICS_HOST: '127.0.0.1' },
    log,
  });
  assert.equal(telemetry.metricsPort, port);
  assert.equal(telemetry.tracing, false, 'no OTEL_* variables: metrics only');
  db = await freshDatabase();
  await createAppliedTable(db.sql);
  await createTopic(topic, 2);
  relay = await startInlineRelay(db.sql, log, { maxMessageBytes: 4096 });
});

after(async () => {
  await relay.stop();
  await stopConsumer?.();
  await telemetry.shutdown();
  await db.drop();
});

type Labels = Record<string, string>;
interface Sample {
  name: string;
  labels: Labels;
  value: number;
}

async function scrape(): Promise<Sample[]> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels: Labels = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return samples;
}

/** Sum of the samples of `metric` whose labels include `labels` (a label given as null must be absent). */
function value(samples: Sample[], metric: string, labels: Record<string, string | null> = {}): number | undefined {
  const hits = samples.filter(
    (s) =>
      s.name === metric &&
      Object.entries(labels).every(([k, v]) => (v === null ? !(k in s.labels) : s.labels[k] === v)),
  );
  return hits.length === 0 ? undefined : hits.reduce((sum, s) => sum + s.value, 0);
}

async function metricsUntil(what: string, ok: (s: Sample[]) => boolean, timeoutMs = 20_000): Promise<Sample[]> {
  let last: Sample[] = [];
  return waitFor(
    what,
    async () => {
      last = await scrape();
      return ok(last) ? last : undefined;
    },
    timeoutMs,
    500,
  ).catch((e: unknown) => {
    const relevant = last
      .filter((s) => s.name.startsWith('postbox_') || s.name.startsWith('messaging_'))
      .map((s) => `${s.name}${JSON.stringify(s.labels)} ${s.value}`);
    throw new Error(`${(e as Error).message}\n${relevant.join('\n')}`);
  });
}

test('a topic whose every event was published between two scrapes has its outbox gauges, at 0', async () => {
  const quick = uniqueTopic('metrics0');
  await createTopic(quick, 1);
  const rows = [1, 2, 3].map((v) => ({
    event_type: 'OrderPlaced',
    aggregate_id: 'q-1',
    aggregate_version: v,
    data: {},
  }));
  await db.sql.begin((tx) => enqueueMany(tx, rows, { topic: quick }));
  relay.wake();
  await waitFor('the relay to publish them', async () => {
    const [r] = await db.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM message_outbox WHERE topic = ${quick} AND status = 'published'`;
    return r!.n === rows.length;
  });
  const dest = { messaging_destination_name: quick };
  const s = await metricsUntil(
    'the topic in the outbox gauges',
    (x) => value(x, 'postbox_outbox_pending', { ...dest, postbox_outbox_status: 'pending' }) !== undefined,
  );
  assert.equal(value(s, 'postbox_outbox_pending', { ...dest, postbox_outbox_status: 'publishing' }), 0);
  assert.equal(value(s, 'postbox_outbox_pending', { ...dest, postbox_outbox_status: 'pending' }), 0);
  assert.equal(value(s, 'postbox_outbox_oldest_pending_age', dest), 0);
  assert.equal(value(s, 'postbox_outbox_failed', dest), 0);
});

test('relay and consumer metrics on the Prometheus endpoint, with values the flow implies', async () => {
  const rows: EventInput[] = [];
  for (let v = 1; v <= 2; v++)
    for (let a = 0; a < EVENTS / 2; a++)
      rows.push({ event_type: 'OrderPlaced', aggregate_id: `m-${a}`, aggregate_version: v, data: { v } });
  await db.sql.begin((tx) => enqueueMany(tx, rows, { topic }));
  relay.wake();
  const consumer = await startInlineConsumer(db.url, { name, topics: [topic], handler: TRACED_HANDLER }, log, true);
  stopConsumer = consumer.stop;
  const who = { postbox_consumer_name: name };
  const dest = { messaging_destination_name: topic };

  let s = await metricsUntil(
    'every event applied',
    (x) => value(x, 'postbox_consumer_events_total', { ...who, postbox_outcome: 'applied' }) === EVENTS,
  );
  assert.equal(
    value(s, 'messaging_client_sent_messages_total', { ...dest, error_type: null }),
    EVENTS,
    'sent = published',
  );
  assert.equal(value(s, 'messaging_client_sent_messages_total', { ...dest, messaging_system_name: 'kafka' }), EVENTS);
  assert.equal(value(s, 'postbox_relay_publish_latency_count', dest), EVENTS);
  const latency = value(s, 'postbox_relay_publish_latency_sum', dest)! / EVENTS;
  assert.ok(latency >= 0 && latency < 60, `mean publish latency ${latency} s`);
  assert.ok(value(s, 'messaging_client_operation_duration_count', { messaging_operation_name: 'send' })! >= 1);
  assert.equal(
    value(s, 'messaging_client_consumed_messages_total', {
      ...who,
      ...dest,
      messaging_consumer_group_name: `postbox.${name}`,
    }),
    EVENTS,
  );
  assert.equal(value(s, 'postbox_consumer_end_to_end_age_count', { ...who, ...dest }), EVENTS);
  const age = value(s, 'postbox_consumer_end_to_end_age_sum', who)! / EVENTS;
  assert.ok(age > 0 && age < 60, `mean end-to-end age ${age} s`);
  assert.ok(value(s, 'messaging_process_duration_count', who)! >= 1);
  assert.equal(
    value(s, 'postbox_consumer_events_total', { ...who, postbox_outcome: 'duplicate' }),
    undefined,
    'no duplicates yet',
  );
  s = await metricsUntil(
    'the outbox drained and the lag fetched at 0',
    (x) =>
      value(x, 'postbox_outbox_pending', { ...dest, postbox_outbox_status: 'pending' }) === 0 &&
      value(x, 'postbox_consumer_lag', who) === 0,
  );
  assert.equal(value(s, 'postbox_outbox_oldest_pending_age', dest), 0);
  assert.equal(
    s.filter((x) => x.name === 'postbox_consumer_lag' && x.labels.postbox_consumer_name === name).length,
    2,
    'lag per partition',
  );

  // Everything delivered again: each redelivered event is a duplicate, nothing is applied twice.
  await consumer.stop();
  stopConsumer = null;
  await resetGroupToEarliest(`postbox.${name}`, topic);
  const again = await startInlineConsumer(db.url, { name, topics: [topic], handler: TRACED_HANDLER }, log, true);
  stopConsumer = again.stop;
  s = await metricsUntil(
    'the redelivery counted as duplicates',
    (x) => value(x, 'postbox_consumer_events_total', { ...who, postbox_outcome: 'duplicate' }) === EVENTS,
  );
  assert.equal(
    value(s, 'postbox_consumer_events_total', { ...who, postbox_outcome: 'applied' }),
    EVENTS,
    'applied once only',
  );

  // A version gap parks; bytes that are not JSON fail (and block their aggregate); the gauges read the database.
  await produce(topic, [
    ceRecord({ aggregate_id: 'm-0', version: 4 }),
    { ...ceRecord({ aggregate_id: 'm-poison', version: 1 }), value: Buffer.from('not json') },
  ]);
  s = await metricsUntil(
    'parked and failed, counted and in the gauges',
    (x) =>
      value(x, 'postbox_consumer_events_total', { ...who, postbox_outcome: 'parked' }) === 1 &&
      value(x, 'postbox_consumer_events_total', { ...who, postbox_outcome: 'failed', error_type: 'not_json' }) === 1 &&
      value(x, 'postbox_consumer_parked', who) === 1 &&
      value(x, 'postbox_consumer_failures_open', who) === 1 &&
      value(x, 'postbox_consumer_blocked_aggregates', who) === 1,
  );
  assert.equal(value(s, 'postbox_consumer_retries_waiting', who), 0);

  // Rows the relay cannot send yet (held back an hour) are pending, with an age; one over the broker's limit fails.
  const held = await db.sql.begin(async (tx) => {
    const envelopes = await enqueueMany(
      tx,
      [1, 2, 3].map((i) => ({ event_type: 'OrderPlaced', aggregate_id: `held-${i}`, aggregate_version: 1, data: {} })),
      { topic },
    );
    await tx`UPDATE message_outbox SET available_at = now() + interval '1 hour' WHERE event_id = ANY(${envelopes.map((e) => e.event_id)}::uuid[])`;
    return envelopes.length;
  });
  await db.sql.begin((tx) =>
    enqueueMany(
      tx,
      [{ event_type: 'OrderPlaced', aggregate_id: 'too-big', aggregate_version: 1, data: { pad: 'x'.repeat(5000) } }],
      { topic },
    ),
  );
  relay.wake();
  s = await metricsUntil(
    'pending, oldest age and the relay failure',
    (x) =>
      value(x, 'postbox_outbox_pending', { ...dest, postbox_outbox_status: 'pending' }) === held &&
      (value(x, 'postbox_outbox_oldest_pending_age', dest) ?? 0) > 0 &&
      value(x, 'postbox_relay_publish_failures_total', {
        ...dest,
        postbox_outcome: 'failed',
        error_type: 'message_too_large',
      }) === 1 &&
      value(x, 'postbox_outbox_failed', dest) === 1,
  );
  assert.equal(
    value(s, 'messaging_client_sent_messages_total', { ...dest, error_type: 'message_too_large' }),
    undefined,
    'a refused row was never sent',
  );

  // Metrics never carry an event id, a key or an offset (docs/telemetry.md).
  const labelNames = new Set(
    s
      .filter((x) => x.name.startsWith('postbox_') || x.name.startsWith('messaging_'))
      .flatMap((x) => Object.keys(x.labels)),
  );
  for (const forbidden of ['messaging_message_id', 'kafka_message_key', 'kafka_offset', 'messaging_kafka_offset'])
    assert.ok(!labelNames.has(forbidden), forbidden);
});

test('saga gauges while a saga timer runner runs: instances by status, oldest running age, time to end', async () => {
  const flow = defineSaga<{ n: number }>({
    type: 'metrics-flow',
    version: 1,
    steps: [
      {
        name: 'only',
        topic: 'metrics.saga.commands',
        command: (d) => ({ type: 'metrics.do', data: d }),
        success: ['metrics.done'],
        failure: ['metrics.refused'],
      },
    ],
  });
  const sagas = new SagaOrchestrator([flow]);
  const started = await db.sql.begin(async (tx) => [
    await sagas.start(tx, flow, { businessKey: 'a', data: { n: 1 } }),
    await sagas.start(tx, flow, { businessKey: 'b', data: { n: 2 } }),
  ]);
  const reply = (sagaId: string) => ({
    eventId: randomUUID(),
    sagaId,
    step: 'only',
    direction: 'forward' as const,
    attempt: 1,
    type: 'metrics.done',
    data: {},
  });
  await db.sql.begin((tx) => sagas.onReply(tx, reply(started[0]!.sagaId)));
  const runner = new SagaTimerRunner(db.sql, sagas, { intervalMs: 60_000 });
  runner.start();
  try {
    const status = (st: string) => ({ postbox_saga_status: st });
    const s = await metricsUntil(
      'one saga completed, one running',
      (x) =>
        value(x, 'postbox_saga_instances', status('completed')) === 1 &&
        value(x, 'postbox_saga_instances', status('running')) === 1,
    );
    assert.equal(value(s, 'postbox_saga_instances', status('needs_attention')), 0);
    assert.ok((value(s, 'postbox_saga_oldest_running_age') ?? -1) >= 0);
    assert.ok(
      value(s, 'postbox_saga_time_to_end', { ...status('completed'), postbox_quantile: 'p99' }) !== undefined,
      'the completed saga counts in the time to end',
    );
  } finally {
    await runner.stop();
  }
});

test('storage gauges while partition maintenance runs: size, partitions ahead, default rows, time since retention', async () => {
  const maintenance = new PartitionMaintenance({
    sql: db.sql,
    options: resolvePartitionOptions({ checkMs: 60_000 }),
    log: silentLogger,
  });
  await maintenance.start();
  try {
    const outbox = { postbox_table: 'message_outbox' };
    const s = await metricsUntil(
      'the outbox partitions ahead and its size',
      (x) =>
        (value(x, 'postbox_storage_partitions_ahead', outbox) ?? 0) >= 6 &&
        (value(x, 'postbox_storage_bytes', outbox) ?? 0) > 0,
    );
    assert.equal(value(s, 'postbox_storage_default_rows', outbox), 0);
    assert.ok((value(s, 'postbox_storage_partitions_ahead', { postbox_table: 'message_inbox' }) ?? 0) >= 6);
    assert.equal(value(s, 'postbox_retention_last_success_age'), -1, 'no retention run yet');
  } finally {
    await maintenance.stop();
  }
});
