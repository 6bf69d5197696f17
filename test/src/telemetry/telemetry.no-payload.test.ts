import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { startTelemetry, type Telemetry } from '@postbox/api';
import { enqueue, enqueueMany, newEventId } from '@postbox/engine';
import type { Relay } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';
import { ceRecord, produce } from '../support/consumer.ts';
import { captureLog, createAppliedTable, startInlineConsumer, startInlineRelay, TRACED_HANDLER } from './support.ts';

// A payload never leaves its columns (docs/design.md §10): a canary secret rides in the data of events that are
// applied, fail for good, fail transiently (retry ledger + BullMQ job), arrive as bytes that are not JSON, are too
// large for the broker, or cannot be serialized — and must then appear in no log line, span (attribute, link,
// event, status), error message, failure/ledger/blocked/outbox error text, or Redis key of the retry queue.

const CANARY = `CANARY-${randomBytes(8).toString('hex')}`;
// V8's JSON.parse error quotes about 10 characters of the text: a short secret fits whole ('Zq': never in a hex id).
const SHORT_CANARY = `Zq${randomBytes(3).toString('hex')}`;
const exporter = new InMemorySpanExporter();
const capture = captureLog();
let telemetry: Telemetry;
let db: TestDatabase;
let relay: Relay;
const topic = uniqueTopic('canary');
const consumer = `canary-${randomBytes(3).toString('hex')}`;
const queueName = `postbox-retry-test.${consumer}`;
let stopConsumer: () => Promise<void>;

before(async () => {
  telemetry = await startTelemetry('test', {
    env: {},
    spanProcessors: [new SimpleSpanProcessor({ exporter })],
    metricReaders: [],
  });
  db = await freshDatabase();
  await createAppliedTable(db.sql);
  await createTopic(topic, 2);
  // A small broker limit, so one event fails in the relay (message_too_large) without touching the others.
  relay = await startInlineRelay(db.sql, capture.log, { maxMessageBytes: 4096 });
  // Retries wait long enough for the test to read the job while it is still in Redis.
  ({ stop: stopConsumer } = await startInlineConsumer(
    db.url,
    {
      name: consumer,
      topics: [topic],
      handler: TRACED_HANDLER,
      retry: { minDelayMs: 2000, baseMs: 2000, capMs: 2500, maxAttempts: 3 },
    },
    capture.log,
    true,
  ));
});

after(async () => {
  await relay.stop();
  await stopConsumer();
  await telemetry.shutdown();
  await db.drop();
});

function spanTexts(span: ReadableSpan): string[] {
  return [
    span.name,
    JSON.stringify(span.attributes),
    JSON.stringify(span.links.map((l) => l.attributes ?? {})),
    JSON.stringify(span.events),
    span.status.message ?? '',
  ];
}

/** Every key of the retry queue and its contents, as text. */
async function redisDump(redis: Redis): Promise<string[]> {
  const out: string[] = [];
  for (const key of await redis.keys(`bull:${queueName}:*`)) {
    const type = await redis.type(key);
    if (type === 'hash') out.push(JSON.stringify(await redis.hgetall(key)));
    else if (type === 'string') out.push((await redis.get(key)) ?? '');
    else if (type === 'zset') out.push((await redis.zrange(key, 0, -1)).join(' '));
    else if (type === 'list') out.push((await redis.lrange(key, 0, -1)).join(' '));
    else if (type === 'set') out.push((await redis.smembers(key)).join(' '));
    else if (type === 'stream') out.push(JSON.stringify(await redis.xrange(key, '-', '+')));
    out.push(key);
  }
  return out;
}

test('a canary secret in payloads appears in no log, span, error text, error message or retry job', async () => {
  const redis = new Redis(stack.REDIS_URL, { maxRetriesPerRequest: 1 });
  try {
    await db.sql.begin((tx) =>
      enqueueMany(
        tx,
        [
          { event_type: 'OrderPlaced', aggregate_id: 'c-ok', aggregate_version: 1, data: { card: CANARY } },
          {
            event_type: 'OrderPlaced',
            aggregate_id: 'c-permanent',
            aggregate_version: 1,
            data: { mode: 'permanent', card: CANARY },
          },
          {
            event_type: 'OrderPlaced',
            aggregate_id: 'c-transient',
            aggregate_version: 1,
            data: { mode: 'transient-once', secret: CANARY },
          },
          {
            event_type: 'OrderPlaced',
            aggregate_id: 'c-large',
            aggregate_version: 1,
            data: { card: CANARY, pad: 'x'.repeat(5000) },
          },
        ],
        { topic },
      ),
    );
    relay.wake();
    // Bytes that are not JSON, with a secret where V8's JSON.parse error message would quote it.
    await produce(topic, [
      { ...ceRecord({ aggregate_id: 'c-notjson', version: 1 }), value: Buffer.from(`${SHORT_CANARY} ${CANARY}`) },
    ]);
    // A payload that cannot be serialized: the enqueue fails, and its error says why without the data.
    const unserializable = await db.sql
      .begin((tx) =>
        enqueue(
          tx,
          { event_type: 'OrderPlaced', aggregate_id: 'c-bigint', aggregate_version: 1, data: { card: CANARY, n: 1n } },
          { topic },
        ),
      )
      .then(
        () => null,
        (e: unknown) => e as Error,
      );
    assert.ok(unserializable, 'a BigInt in data is refused');

    // The retry job while it waits in Redis: ids (and a trace context) only.
    const jobs = await waitFor(
      'the retry job in Redis',
      async () => {
        const keys = (await redis.keys(`bull:${queueName}:*`)).filter((k) =>
          /:[^:]+\.[0-9a-f-]{36}\.\d+\.\d+$/.test(k),
        );
        return keys.length > 0 ? keys : undefined;
      },
      30_000,
    );
    const job = await redis.hgetall(jobs[0]!);
    const data = JSON.parse(job.data!) as Record<string, unknown>;
    assert.deepEqual(
      Object.keys(data).sort(),
      ['attempt', 'consumer', 'dueAt', 'eventId', 'traceparent'].sort(),
      `job data holds ids only: ${job.data}`,
    );
    const redisWhileWaiting = await redisDump(redis);

    await waitFor(
      'every outcome settled',
      async () => {
        const [s] = await db.sql<{ applied: number; failures: number; outbox_failed: number }[]>`
        SELECT (SELECT count(*)::int FROM telemetry_applied WHERE consumer = ${consumer}) AS applied,
               (SELECT count(*)::int FROM message_failure WHERE consumer_name = ${consumer}) AS failures,
               (SELECT count(*)::int FROM message_outbox WHERE status = 'failed') AS outbox_failed`;
        return s!.applied === 2 && s!.failures === 2 && s!.outbox_failed === 1;
      },
      40_000,
    );

    const failures = await db.sql<{ error_code: string; error_detail: string; payload: Buffer | null }[]>`
      SELECT error_code, error_detail, payload FROM message_failure WHERE consumer_name = ${consumer} ORDER BY failure_id`;
    assert.deepEqual(failures.map((f) => f.error_code).sort(), ['not_json', 'test_rejected']);
    assert.ok(
      failures.every((f) => f.payload?.toString().includes(CANARY)),
      'the failure store keeps the payload itself, in its own column',
    );
    assert.ok(failures.some((f) => f.payload?.toString().includes(SHORT_CANARY)));
    const texts: Array<[string, string]> = [
      ...failures.map((f): [string, string] => [`failure ${f.error_code}`, `${f.error_code} ${f.error_detail}`]),
      ...(
        await db.sql<
          { t: string }[]
        >`SELECT last_error_code || ' ' || last_error AS t FROM message_retry WHERE consumer_name = ${consumer}`
      ).map((r): [string, string] => ['retry ledger', r.t]),
      ...(
        await db.sql<
          { t: string }[]
        >`SELECT coalesce(detail, '') AS t FROM consumer_blocked_aggregate WHERE consumer_name = ${consumer}`
      ).map((r): [string, string] => ['blocked aggregate', r.t]),
      ...(await db.sql<{ t: string }[]>`SELECT coalesce(last_error, '') AS t FROM message_outbox`).map(
        (r): [string, string] => ['outbox last_error', r.t],
      ),
      [
        'enqueue error',
        `${unserializable.message} ${String((unserializable.cause as Error | undefined)?.message ?? '')}`,
      ],
      ...capture.lines().map((l): [string, string] => ['log line', l]),
      ...exporter.getFinishedSpans().flatMap((s) => spanTexts(s).map((t): [string, string] => [`span ${s.name}`, t])),
      ...redisWhileWaiting.map((t): [string, string] => ['redis (job waiting)', t]),
      ...(await redisDump(redis)).map((t): [string, string] => ['redis (after)', t]),
    ];
    // The checks saw something: the failure paths did write text, log lines, spans and a job.
    assert.ok(
      failures.find((f) => f.error_code === 'test_rejected')!.error_detail.includes('[redacted]'),
      'the handler’s quote of the data was redacted',
    );
    assert.ok(
      capture.lines().some((l) => l.includes('event failed for good')),
      'failures were logged',
    );
    assert.ok(
      capture.lines().some((l) => l.includes('relay gave up on event')),
      'the relay failure was logged',
    );
    assert.ok(exporter.getFinishedSpans().length >= 10, 'spans were recorded');
    for (const [where, text] of texts) {
      for (const secret of [CANARY, SHORT_CANARY])
        assert.ok(!text.includes(secret), `the canary leaked into ${where}: ${text.slice(0, 300)}`);
    }

    // The belt: a payload handed to the logger by mistake is censored.
    const belt = captureLog();
    belt.log.warn(
      { data: { card: CANARY }, payload: CANARY, record: { value: CANARY }, event_id: newEventId() },
      'a careless line',
    );
    await new Promise((r) => setImmediate(r));
    assert.equal(belt.lines().length, 1);
    assert.ok(!belt.lines()[0]!.includes(CANARY), belt.lines()[0]);
  } finally {
    redis.disconnect();
  }
});
