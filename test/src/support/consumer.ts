import { fileURLToPath } from 'node:url';
import { Kafka, logLevel, Partitioners, type Message } from 'kafkajs';
import { defineConsumer, enqueueMany, newEventId, type ConsumerInput, type Sql } from '@postbox/engine';
import { fromKafkaHeaders, KafkaSubscriber, type KafkaSubscriberOptions } from '@postbox/engine/kafka';
import { Consumer, encodeTask, inlineConsumeExecutor } from '@postbox/engine/runtime';
import { createConsumePool } from '@postbox/workers';
import { waitFor, type RoleProcess } from './processes.ts';
import { stack } from './stack.ts';

export const RECORDING_HANDLER = new URL('../consumer/fixtures/recording-handler.ts', import.meta.url);
export const TEST_CONSUMER_MODULE = fileURLToPath(new URL('../consumer/fixtures/test-consumer.ts', import.meta.url));

const kafka = () =>
  new Kafka({ clientId: 'postbox-test-producer', brokers: stack.KAFKA_BROKERS.split(','), logLevel: logLevel.NOTHING });

export interface RawRecord {
  key: string | null;
  value: Buffer | null;
  headers: Record<string, string>;
}

export interface TestEvent {
  aggregate_id: string;
  version: number;
  event_type?: string;
  schema_version?: number;
  event_id?: string;
  data?: unknown;
  /** Extra or overriding headers (e.g. ce_deadline). */
  headers?: Record<string, string>;
}

/** A record as the relay writes it (CloudEvents binary mode, see engine relay/record.ts). */
export function ceRecord(e: TestEvent): RawRecord {
  return {
    key: e.aggregate_id,
    value: Buffer.from(JSON.stringify(e.data ?? { v: e.version })),
    headers: {
      ce_specversion: '1.0',
      ce_id: e.event_id ?? newEventId(),
      ce_type: e.event_type ?? 'TestEvent',
      ce_source: 'postbox-test',
      ce_subject: e.aggregate_id,
      ce_time: new Date().toISOString(),
      ce_aggregateversion: String(e.version),
      ce_schemaversion: String(e.schema_version ?? 1),
      'content-type': 'application/json',
      ...e.headers,
    },
  };
}

/**
 * Tasks for the consume step without a broker: each record as the Kafka subscriber hands it over (headers
 * broker-neutral), first delivery, on partition 0 of `topic` at the next offset of this task source.
 */
export function taskSource(topic: string): (records: RawRecord[]) => ReturnType<typeof encodeTask> {
  let offset = 0;
  return (records) =>
    encodeTask(
      records.map((r) => ({
        ...r,
        headers: fromKafkaHeaders(r.headers),
        topic,
        partition: 0,
        offset: String(offset++),
        attempt: 1,
      })),
    );
}

/** Produces records straight to Kafka (murmur2 by key, like the relay), in the order given, acks = all. */
export async function produce(topic: string, records: RawRecord[], chunk = 500): Promise<void> {
  const producer = kafka().producer({
    createPartitioner: Partitioners.DefaultPartitioner,
    idempotent: true,
    maxInFlightRequests: 1,
  });
  await producer.connect();
  try {
    for (let i = 0; i < records.length; i += chunk) {
      const messages: Message[] = records
        .slice(i, i + chunk)
        .map((r) => ({ key: r.key, value: r.value, headers: r.headers }));
      await producer.send({ topic, acks: -1, messages });
    }
  } finally {
    await producer.disconnect();
  }
}

/** Tables the recording handler writes (the projection table comes from migration 0005). */
export async function createHandlerTables(sql: Sql, delayMs = 0): Promise<void> {
  await sql`CREATE TABLE IF NOT EXISTS test_applied (seq bigserial PRIMARY KEY, consumer text NOT NULL, aggregate_id text NOT NULL,
    version bigint NOT NULL, event_id uuid NOT NULL, partition int, "offset" bigint)`;
  await sql`CREATE TABLE IF NOT EXISTS test_handler_control (id int PRIMARY KEY, delay_ms int NOT NULL, fail_aggregates text[] NOT NULL DEFAULT '{}')`;
  await sql`CREATE TABLE IF NOT EXISTS test_attempt (seq bigserial PRIMARY KEY, consumer text NOT NULL, aggregate_id text NOT NULL,
    version bigint NOT NULL, event_id uuid NOT NULL, attempt int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`;
  await sql`INSERT INTO test_handler_control VALUES (1, ${delayMs}) ON CONFLICT (id) DO UPDATE SET delay_ms = EXCLUDED.delay_ms`;
}

/** Applied versions per aggregate, in the order they were applied. */
export async function appliedSequences(sql: Sql, consumer: string): Promise<Map<string, number[]>> {
  const rows = await sql<{ aggregate_id: string; version: string }[]>`
    SELECT aggregate_id, version::text FROM test_applied WHERE consumer = ${consumer} ORDER BY seq`;
  const out = new Map<string, number[]>();
  for (const r of rows) out.set(r.aggregate_id, [...(out.get(r.aggregate_id) ?? []), Number(r.version)]);
  return out;
}

/** A consumer in this process, with a real piscina pool (threads > 0) or inline. */
export async function startTestConsumer(
  databaseUrl: string,
  input: ConsumerInput,
  options: { inline?: boolean; subscriber?: Partial<KafkaSubscriberOptions> } = {},
): Promise<Consumer> {
  const definition = defineConsumer(input);
  const subscriber = new KafkaSubscriber({
    brokers: stack.KAFKA_BROKERS.split(','),
    clientId: 'postbox-test-consumer',
    groupId: definition.groupId,
    topics: definition.topics,
    fromBeginning: definition.fromBeginning,
    ...options.subscriber,
  });
  const executor = options.inline
    ? inlineConsumeExecutor(definition, databaseUrl)
    : createConsumePool({ databaseUrl, definition });
  const consumer = new Consumer({ definition, subscriber, executor, lagIntervalMs: 1000 });
  await consumer.start();
  return consumer;
}

/** Moves a stopped group back to the beginning of the topic: everything is delivered again. */
export async function resetGroupToEarliest(groupId: string, topic: string): Promise<void> {
  const admin = kafka().admin();
  await admin.connect();
  try {
    await admin.resetOffsets({ groupId, topic, earliest: true });
  } finally {
    await admin.disconnect();
  }
}

/** The group's committed offsets per partition (-1 = none). */
export async function committedOffsets(groupId: string, topic: string): Promise<Map<number, string>> {
  const admin = kafka().admin();
  await admin.connect();
  try {
    const [t] = await admin.fetchOffsets({ groupId, topics: [topic] });
    return new Map((t?.partitions ?? []).map((p) => [p.partition, p.offset]));
  } finally {
    await admin.disconnect();
  }
}

/** Fisher–Yates with a seeded generator, so a failing order can be reproduced from the seed in the message. */
export function shuffle<T>(items: T[], seed: number): T[] {
  const out = [...items];
  let s = seed >>> 0 || 1;
  const rnd = () => (s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32;
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** `n` TestEvents on `topic` in one transaction: ten aggregates, each one's versions 1, 2, … in order. */
export async function enqueueTestEvents(sql: Sql, topic: string, n: number, producer = 'test'): Promise<void> {
  const events = Array.from({ length: n }, (_, i) => ({
    aggregate_id: `order-${i % 10}`,
    aggregate_version: Math.floor(i / 10) + 1,
    event_type: 'TestEvent',
    data: { n: i },
  }));
  await sql.begin((tx) => enqueueMany(tx, events, { topic, producer }));
}

/**
 * Waits until `consumer` has applied `n` events (test_applied rows); on timeout the error carries the last output
 * of each process named, the relay's and the consumer's say.
 */
export async function waitForApplied(
  sql: Sql,
  consumer: string,
  n: number,
  processes: Record<string, RoleProcess | undefined>,
  timeoutMs = 120_000,
): Promise<void> {
  await waitFor(
    'every event applied',
    async () => {
      const [row] = await sql<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM test_applied WHERE consumer = ${consumer}`;
      return row!.n === n;
    },
    timeoutMs,
  ).catch((cause: unknown) => {
    const outputs = Object.entries(processes).map(
      ([name, p]) => `${name}:\n${p?.output().slice(-2000) ?? '(not started)'}`,
    );
    throw new Error([(cause as Error).message, ...outputs].join('\n'), { cause });
  });
}

/** How many events `consumer` applied more than once (test_applied rows of one event id). */
export async function appliedTwice(sql: Sql, consumer: string): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM (SELECT event_id FROM test_applied WHERE consumer = ${consumer}
                                    GROUP BY event_id HAVING count(*) > 1) d`;
  return row!.n;
}
