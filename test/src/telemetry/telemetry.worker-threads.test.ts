import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { startTelemetry, type Telemetry } from '@postbox/api';
import { enqueueMany } from '@postbox/engine';
import { Relay, resolveRelayOptions, type Consumer } from '@postbox/engine/runtime';
import { createPublishPool } from '@postbox/workers';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';
import { startTestConsumer } from '../support/consumer.ts';
import { createAppliedTable, TRACED_HANDLER } from './support.ts';

// The production path: relay and consumer in piscina threads, tracing turned on by the standard OTEL_* variables
// only, spans exported over OTLP (http/json) to a collector — here a small one in this test. Each thread runs its
// own SDK; the batch processor's delay is set far beyond the test, so every worker span that arrives was
// flushed by the pools' close (thread-telemetry.ts), not by a timer.

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  links?: Array<{ traceId: string; spanId: string }>;
  attributes?: Array<{ key: string; value: Record<string, unknown> }>;
}
interface Received {
  role: string;
  span: OtlpSpan;
}

const received: Received[] = [];
let collector: Server;
let telemetry: Telemetry;
let db: TestDatabase;
const topic = uniqueTopic('threads');
const name = `threads-${randomBytes(3).toString('hex')}`;
const EVENTS = 10;

const hex = (id: string) => (/^[0-9a-f]+$/.test(id) ? id : Buffer.from(id, 'base64').toString('hex'));
const attr = (s: OtlpSpan, key: string) => {
  const v = s.attributes?.find((a) => a.key === key)?.value;
  return v ? (v.stringValue ?? v.intValue ?? v.boolValue ?? v.doubleValue) : undefined;
};

before(async () => {
  collector = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const payload = JSON.parse(body) as {
        resourceSpans: Array<{
          resource: { attributes: Array<{ key: string; value: { stringValue?: string } }> };
          scopeSpans: Array<{ spans: OtlpSpan[] }>;
        }>;
      };
      for (const rs of payload.resourceSpans) {
        const role = rs.resource.attributes.find((a) => a.key === 'postbox.role')?.value.stringValue ?? '?';
        for (const ss of rs.scopeSpans)
          for (const span of ss.spans)
            received.push({
              role,
              span: {
                ...span,
                traceId: hex(span.traceId),
                spanId: hex(span.spanId),
                ...(span.parentSpanId ? { parentSpanId: hex(span.parentSpanId) } : {}),
                links: (span.links ?? []).map((l) => ({ ...l, traceId: hex(l.traceId), spanId: hex(l.spanId) })),
              },
            });
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
  const { port } = collector.address() as { port: number };
  // Only the standard variables, read by the main thread and copied into every worker thread at its start.
  Object.assign(process.env, {
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `http://127.0.0.1:${port}/v1/traces`,
    OTEL_BSP_SCHEDULE_DELAY: '600000',
  });
  telemetry = await startTelemetry('command');
  assert.equal(telemetry.tracing, true);
  db = await freshDatabase();
  await createAppliedTable(db.sql);
  await createTopic(topic, 2);
});

after(async () => {
  await db.drop();
  await new Promise((resolve) => collector.close(resolve));
});

test('spans made in relay and consumer worker threads are exported, linked, and none lost when the pools close', async () => {
  const options = resolveRelayOptions({ pollMs: 200 });
  const relay = new Relay({
    sql: db.sql,
    executor: createPublishPool({
      databaseUrl: db.url,
      broker: { kind: 'kafka', kafka: { brokers: stack.KAFKA_BROKERS.split(','), clientId: 'postbox-threads-test' } },
      relay: options,
      threads: 2,
    }),
    options,
  });
  await relay.start();
  let consumer: Consumer | null = await startTestConsumer(db.url, {
    name,
    topics: [topic],
    handler: TRACED_HANDLER,
    limits: { threads: 1 },
  });
  try {
    const events = await db.sql.begin((tx) =>
      enqueueMany(
        tx,
        Array.from({ length: EVENTS }, (_, i) => ({
          event_type: 'OrderPlaced',
          aggregate_id: `t-${i}`,
          aggregate_version: 1,
          data: {},
        })),
        { topic },
      ),
    );
    relay.wake();
    await waitFor(
      'all applied',
      async () => {
        const [r] = await db.sql<
          { n: number }[]
        >`SELECT count(*)::int AS n FROM telemetry_applied WHERE consumer = ${name}`;
        return r!.n === EVENTS;
      },
      60_000,
    );
    assert.equal(
      received.filter((r) => r.role !== 'command').length,
      0,
      'nothing exported by a timer yet (the delay is 10 minutes)',
    );
    await consumer.stop();
    consumer = null;
    await relay.stop();
    await telemetry.shutdown();

    const creates = new Map(
      received
        .filter((r) => r.span.name === `create ${topic}`)
        .map((r) => [String(attr(r.span, 'messaging.message.id')), r]),
    );
    assert.equal(creates.size, EVENTS, 'the main thread exported every create span');
    const sends = received.filter((r) => r.span.name === `send ${topic}`);
    assert.ok(sends.length >= 1 && sends.every((r) => r.role === 'relay'), 'send spans come from the relay threads');
    const processes = received.filter((r) => r.span.name === `process ${topic}`);
    assert.equal(processes.length, EVENTS, 'one process span per event, from the consumer thread');
    for (const event of events) {
      const create = creates.get(event.event_id)!.span;
      const linked = (s: OtlpSpan) =>
        (s.links ?? []).some((l) => l.traceId === create.traceId && l.spanId === create.spanId);
      assert.ok(
        sends.some((r) => linked(r.span)),
        `${event.event_id}: a send span links its creation`,
      );
      const process = processes.find((r) => attr(r.span, 'messaging.message.id') === event.event_id);
      assert.ok(
        process && process.role === 'consumer' && linked(process.span) && !process.span.parentSpanId,
        `${event.event_id}: a root process span linked to its creation`,
      );
      assert.ok(
        received.some((r) => r.span.name === 'handle OrderPlaced' && r.span.parentSpanId === process.span.spanId),
        `${event.event_id}: the handler span inside it`,
      );
    }
  } finally {
    await consumer?.stop();
    await relay.stop();
  }
});
