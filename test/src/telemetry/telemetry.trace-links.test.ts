import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { context, SpanKind, trace, type SpanContext } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { startTelemetry, type Telemetry } from '@postbox/api';
import { enqueue, type Envelope } from '@postbox/engine';
import { defineSaga, participant, SagaOrchestrator } from '@postbox/engine/saga';
import { listFailures, replayFailures } from '@postbox/engine/control';
import { BullmqRetryScheduler } from '@postbox/engine/bullmq';
import type { Relay } from '@postbox/engine/runtime';
import { formatTraceparent } from '@postbox/engine/testing';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, readTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';
import { captureLog, createAppliedTable, startInlineConsumer, startInlineRelay, TRACED_HANDLER } from './support.ts';

// One event's whole path as a trace viewer sees it (docs/design.md §10, docs/telemetry.md): the command's span → `create`
// (its child, stored with the event) → the relay's `send` (a link per message) → one `process` per consumer
// group, each a new trace linked to the creation context, the handler's own span inside it. Then a transient
// failure (retry spans linked to the failed delivery) and an operator's replay (linked both ways).

const exporter = new InMemorySpanExporter();
let telemetry: Telemetry;
let db: TestDatabase;
let relay: Relay;
const topic = uniqueTopic('trace');
const run = randomBytes(3).toString('hex');
const { log } = captureLog();
const stops: Array<() => Promise<void>> = [];

before(async () => {
  telemetry = await startTelemetry('test', {
    env: {},
    spanProcessors: [new SimpleSpanProcessor({ exporter })],
    metricReaders: [],
  });
  db = await freshDatabase();
  await createAppliedTable(db.sql);
  await createTopic(topic, 3);
  relay = await startInlineRelay(db.sql, log);
});

after(async () => {
  await relay.stop();
  for (const stop of stops) await stop();
  await telemetry.shutdown();
  await db.drop();
});

const spans = () => exporter.getFinishedSpans();
const sameContext = (a: SpanContext, b: SpanContext) => a.traceId === b.traceId && a.spanId === b.spanId;
const linkTo = (span: ReadableSpan, target: SpanContext) => span.links.find((l) => sameContext(l.context, target));

async function appliedBy(consumer: string, eventId: string): Promise<boolean> {
  const rows = await db.sql`SELECT 1 FROM telemetry_applied WHERE consumer = ${consumer} AND event_id = ${eventId}`;
  return rows.length > 0;
}

/** Enqueues one event inside a `POST /orders` span, as an HTTP handler would. */
async function command(
  aggregateId: string,
  data: unknown,
): Promise<{ eventId: string; commandSpan: ReadableSpan; create: ReadableSpan }> {
  const tracer = trace.getTracer('telemetry-test');
  const eventId = await tracer.startActiveSpan('POST /orders', async (span) => {
    try {
      const envelope = await db.sql.begin((tx) =>
        enqueue(tx, { event_type: 'OrderPlaced', aggregate_id: aggregateId, aggregate_version: 1, data }, { topic }),
      );
      return envelope.event_id;
    } finally {
      span.end();
    }
  });
  relay.wake();
  const create = spans().find((s) => s.name === `create ${topic}` && s.attributes['messaging.message.id'] === eventId);
  assert.ok(create, 'a create span for the event');
  const commandSpan = spans().find(
    (s) => s.name === 'POST /orders' && s.spanContext().spanId === create.parentSpanContext?.spanId,
  );
  assert.ok(commandSpan, 'the command span is the create span’s parent');
  return { eventId, commandSpan, create };
}

test('enqueue → send → process: linked for one event across a relay and two consumer groups', async () => {
  const consumers = [`billing-${run}`, `shipping-${run}`];
  for (const name of consumers)
    stops.push((await startInlineConsumer(db.url, { name, topics: [topic], handler: TRACED_HANDLER }, log)).stop);

  const { eventId, commandSpan, create } = await command('order-1', { amountCents: 1250 });

  // create: a PRODUCER child of the command; its context is what the outbox row and the record carry.
  assert.equal(create.kind, SpanKind.PRODUCER);
  assert.equal(create.spanContext().traceId, commandSpan.spanContext().traceId);
  assert.equal(create.attributes['messaging.operation.type'], 'create');
  assert.equal(create.attributes['messaging.destination.name'], topic);
  assert.equal(create.attributes['kafka.message.key'], 'order-1');
  const [row] = await db.sql<
    { traceparent: string }[]
  >`SELECT traceparent FROM message_outbox WHERE event_id = ${eventId}`;
  assert.equal(row!.traceparent, formatTraceparent(create.spanContext()), 'the outbox row stores the creation context');

  for (const name of consumers) await waitFor(`${name} applied the event`, () => appliedBy(name, eventId), 30_000);
  const [record] = await readTopic(topic, (rs) => rs.some((r) => r.headers.ce_id === eventId), 20_000).then((rs) =>
    rs.filter((r) => r.headers.ce_id === eventId),
  );
  assert.equal(
    record!.headers.traceparent,
    row!.traceparent,
    'the record header carries the creation context unchanged',
  );

  // send: a CLIENT span of the relay's own trace, linked to the creation context with the message's position.
  const send = await waitFor('the send span', async () =>
    spans().find((s) => s.name === `send ${topic}` && linkTo(s, create.spanContext())),
  );
  assert.equal(send.kind, SpanKind.CLIENT);
  assert.notEqual(send.spanContext().traceId, create.spanContext().traceId, 'send is not part of the command’s trace');
  for (const [k, v] of Object.entries({
    'messaging.system.name': 'kafka',
    'messaging.system': 'kafka',
    'messaging.operation.type': 'send',
    'messaging.operation.name': 'send',
    'messaging.destination.name': topic,
  })) {
    assert.equal(send.attributes[k], v, k);
  }
  assert.ok(Number(send.attributes['messaging.batch.message_count']) >= 1);
  const link = linkTo(send, create.spanContext())!;
  assert.equal(link.attributes?.['messaging.message.id'], eventId);
  assert.equal(link.attributes?.['kafka.message.key'], 'order-1');
  assert.equal(link.attributes?.['messaging.kafka.message.key'], 'order-1');
  assert.equal(link.attributes?.['messaging.destination.partition.id'], String(record!.partition));
  assert.equal(link.attributes?.['kafka.offset'], Number(record!.offset));
  assert.equal(link.attributes?.['messaging.kafka.offset'], Number(record!.offset));

  // process: per consumer group, a new trace (no parent) linked to the creation context; the handler's span inside.
  const processes = await waitFor('a process span per consumer', async () => {
    const found = spans().filter(
      (s) => s.name === `process ${topic}` && s.attributes['messaging.message.id'] === eventId,
    );
    return found.length === 2 ? found : undefined;
  });
  const traces = new Set<string>();
  for (const p of processes) {
    const consumer = String(p.attributes['postbox.consumer.name']);
    assert.ok(consumers.includes(consumer), consumer);
    assert.equal(p.kind, SpanKind.CONSUMER);
    assert.equal(p.parentSpanContext, undefined, `${consumer}: a root span (new trace), not a child of the producer`);
    assert.notEqual(p.spanContext().traceId, create.spanContext().traceId);
    assert.ok(linkTo(p, create.spanContext()), `${consumer}: linked to the creation context`);
    assert.equal(p.attributes['messaging.consumer.group.name'], `postbox.${consumer}`);
    assert.equal(p.attributes['messaging.operation.type'], 'process');
    assert.equal(p.attributes['messaging.destination.partition.id'], String(record!.partition));
    assert.equal(p.attributes['kafka.offset'], Number(record!.offset));
    assert.equal(p.attributes['postbox.outcome'], 'applied');
    const handler = spans().find(
      (s) => s.name === 'handle OrderPlaced' && s.parentSpanContext?.spanId === p.spanContext().spanId,
    );
    assert.ok(handler, `${consumer}: the handler's span is a child of its process span`);
    assert.equal(handler.spanContext().traceId, p.spanContext().traceId);
    traces.add(p.spanContext().traceId);
  }
  assert.equal(traces.size, 2, 'each consumer group has a trace of its own');
});

test('a malformed traceparent supplied at enqueue is ignored: the write succeeds with a fresh creation context', async () => {
  const envelope = await db.sql.begin((tx) =>
    enqueue(
      tx,
      {
        event_type: 'OrderPlaced',
        aggregate_id: 'order-bad-tp',
        aggregate_version: 1,
        data: {},
        traceparent: 'not-a-traceparent',
        tracestate: 'k=v',
      },
      { topic },
    ),
  );
  const create = spans().find(
    (s) => s.name === `create ${topic}` && s.attributes['messaging.message.id'] === envelope.event_id,
  );
  assert.ok(create);
  assert.equal(envelope.traceparent, formatTraceparent(create.spanContext()));
  assert.equal(envelope.tracestate, undefined, 'the tracestate of a dropped traceparent goes with it');

  const supplied = '00-11111111111111111111111111111111-2222222222222222-01';
  const kept = await db.sql.begin((tx) =>
    enqueue(
      tx,
      {
        event_type: 'OrderPlaced',
        aggregate_id: 'order-own-tp',
        aggregate_version: 1,
        data: {},
        traceparent: supplied,
      },
      { topic },
    ),
  );
  assert.equal(kept.traceparent, supplied, 'a valid caller context is the creation context, as given');
});

test('retries and replays are linked spans: retry → the delivery that scheduled it; replay ↔ the retry it scheduled', async () => {
  const name = `retrying-${run}`;
  const durable = await startInlineConsumer(
    db.url,
    { name, topics: [topic], handler: TRACED_HANDLER, retry: { baseMs: 50, capMs: 200, maxAttempts: 3 } },
    log,
    true,
  );
  stops.push(durable.stop);

  // A transient failure: the first delivery schedules a retry; the retry's own trace links back to it.
  const flaky = await command('order-flaky', { mode: 'transient-once', secret: 'x' });
  await waitFor('the retry applied it', () => appliedBy(name, flaky.eventId), 30_000);
  const first = await waitFor('the scheduling delivery', async () =>
    spans().find(
      (s) =>
        s.name === `process ${topic}` &&
        s.attributes['messaging.message.id'] === flaky.eventId &&
        s.attributes['postbox.consumer.name'] === name &&
        s.attributes['postbox.outcome'] === 'scheduled',
    ),
  );
  assert.equal(first.attributes['error.type'], 'error');
  const retry = await waitFor('the retry span', async () =>
    spans().find((s) => s.name === `retry ${topic}` && s.attributes['messaging.message.id'] === flaky.eventId),
  );
  assert.equal(retry.parentSpanContext, undefined, 'a retry attempt starts a trace of its own');
  assert.equal(retry.attributes['postbox.attempt'], 2);
  assert.equal(retry.attributes['postbox.outcome'], 'settled');
  assert.equal(linkTo(retry, flaky.create.spanContext())?.attributes?.['postbox.link'], 'creation');
  assert.equal(linkTo(retry, first.spanContext())?.attributes?.['postbox.link'], 'scheduled_by');
  const inner = spans().find(
    (s) => s.name === `process ${topic}` && s.parentSpanContext?.spanId === retry.spanContext().spanId,
  );
  assert.ok(inner, 'the retried run is a process span inside the retry span');
  assert.equal(inner.attributes['postbox.outcome'], 'applied');
  assert.ok(linkTo(inner, flaky.create.spanContext()), 'and still linked to the creation context');

  // A permanent failure, then an operator's replay: one `replay` span linking the failed event's creation, and the
  // retry it scheduled linking back to the replay.
  const poisoned = await command('order-poison', { mode: 'permanent' });
  await waitFor(
    'the failure stored',
    async () => (await listFailures(db.sql, { consumer: name }, 10, null)).some((f) => f.event_id === poisoned.eventId),
    30_000,
  );
  const scheduler = new BullmqRetryScheduler({
    redisUrl: stack.REDIS_URL,
    consumer: name,
    queueName: `postbox-retry-test.${name}`,
  });
  try {
    const items = await trace.getTracer('telemetry-test').startActiveSpan('mutation replayFailures', async (span) => {
      try {
        return await replayFailures(db.sql, () => scheduler, {
          filter: { consumer: name },
          dryRun: false,
          actor: 'test-operator',
          reason: 'trace test',
          limit: 5,
        });
      } finally {
        span.end();
      }
    });
    assert.deepEqual(
      items.map((i) => i.verdict),
      ['scheduled'],
    );
  } finally {
    await scheduler.close();
  }
  const replay = await waitFor('the replay span', async () =>
    spans().find((s) => s.name === 'replay' && linkTo(s, poisoned.create.spanContext())),
  );
  const request = spans().find((s) => s.name === 'mutation replayFailures')!;
  assert.equal(
    replay.parentSpanContext?.spanId,
    request.spanContext().spanId,
    'the replay is part of the operator’s request',
  );
  assert.equal(replay.attributes['postbox.actor'], 'test-operator');
  assert.equal(replay.attributes['postbox.replay.dry_run'], false);
  const replayed = await waitFor('the replayed retry span', async () =>
    spans().find(
      (s) =>
        s.name === `retry ${topic}` &&
        s.attributes['messaging.message.id'] === poisoned.eventId &&
        linkTo(s, replay.spanContext()),
    ),
  );
  assert.equal(linkTo(replayed, replay.spanContext())?.attributes?.['postbox.link'], 'scheduled_by');
  assert.equal(
    replayed.attributes['postbox.outcome'],
    'exhausted',
    'the handler still rejects it: the replay ran and failed again, visibly',
  );
});

test("a saga's command and its participant's reply: create spans carrying the saga's id, step and direction; the reply a child of the command's processing", async () => {
  const flow = defineSaga<{ n: number }>({
    type: 'traced-flow',
    version: 1,
    steps: [
      {
        name: 'only',
        topic: `${topic}.saga`,
        command: (d) => ({ type: 'traced.do', data: d }),
        success: ['traced.done'],
        failure: ['traced.refused'],
      },
    ],
  });
  const sagas = new SagaOrchestrator([flow]);
  const { sagaId } = await db.sql.begin((tx) => sagas.start(tx, flow, { businessKey: `t-${run}`, data: { n: 1 } }));
  const commandSpan = spans().find((s) => s.attributes['postbox.saga.id'] === sagaId);
  assert.ok(commandSpan, 'the command has a create span with the saga id');
  assert.equal(commandSpan.attributes['postbox.saga.step'], 'only');
  assert.equal(commandSpan.attributes['postbox.saga.direction'], 'forward');

  // The participant handles the command inside a span standing for its processing: its reply's create span is
  // that span's child and names the same saga.
  const [row] = await db.sql<Array<{ event_id: string; extensions: Record<string, string> }>>`
    SELECT event_id, extensions FROM message_outbox WHERE producer = 'saga:traced-flow'`;
  const handle = participant({ name: 'traced', apply: async () => ({ applied: true, type: 'traced.done' }) });
  const processing = trace.getTracer('test').startSpan('process command');
  await context.with(trace.setSpan(context.active(), processing), () =>
    db.sql.begin((tx) =>
      handle(
        {
          event_id: row!.event_id,
          event_type: 'traced.do',
          schema_version: 1,
          aggregate_id: `saga:${sagaId}:only`,
          aggregate_version: 1,
          occurred_at: new Date().toISOString(),
          producer: 'saga:traced-flow',
          data: { n: 1 },
          extensions: row!.extensions,
        } as Envelope,
        tx,
        { consumer: 'traced', partition: 0, offset: '0', attempt: 1 },
      ),
    ),
  );
  processing.end();
  const replySpan = spans().find((s) => s.attributes['postbox.saga.id'] === sagaId && s !== commandSpan);
  assert.ok(replySpan, 'the reply has a create span with the saga id');
  assert.equal(replySpan.parentSpanContext?.spanId, processing.spanContext().spanId);
  assert.equal(replySpan.attributes['postbox.saga.direction'], 'forward');
});
