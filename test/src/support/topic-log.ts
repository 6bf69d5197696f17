import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Kafka, logLevel } from 'kafkajs';
import type { Sql } from '@postbox/engine';

/**
 * A topic's log as some brokers serve it, read by a plain kafkajs consumer written here (not the verifier's
 * reader): for each `partition:offset` below the high watermark taken first, the record's CloudEvents id
 * (`ce_id` header). Bootstrapped with a cluster's surviving nodes alone, it is what those nodes hold: a node that
 * is cut off and fenced is absent from their metadata, so the reader never learns of it.
 */
export async function readTopicLog(brokers: string, topic: string, timeoutMs = 60_000): Promise<Map<string, string>> {
  const kafka = new Kafka({
    clientId: 'postbox-test-log',
    brokers: brokers.split(','),
    logLevel: logLevel.NOTHING,
    connectionTimeout: 2000,
  });
  const admin = kafka.admin();
  await admin.connect();
  const ends = new Map<number, bigint>();
  try {
    for (const p of await admin.fetchTopicOffsets(topic))
      if (BigInt(p.high) > BigInt(p.low)) ends.set(p.partition, BigInt(p.high));
  } finally {
    await admin.disconnect();
  }
  const log = new Map<string, string>();
  if (ends.size === 0) return log;
  const consumer = kafka.consumer({ groupId: `postbox-test-log-${randomUUID()}`, maxWaitTimeInMs: 200 });
  const open = new Set(ends.keys());
  try {
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        const end = ends.get(partition);
        if (end === undefined || BigInt(message.offset) >= end) return;
        log.set(`${partition}:${message.offset}`, String(message.headers?.ce_id ?? ''));
        if (BigInt(message.offset) + 1n >= end) open.delete(partition);
      },
    });
    const deadline = Date.now() + timeoutMs;
    while (open.size > 0) {
      if (Date.now() > deadline)
        throw new Error(`reading ${topic} from ${brokers}: partitions ${[...open].join(', ')} not read to their end`);
      await sleep(200);
    }
    return log;
  } finally {
    await consumer.disconnect();
  }
}

/** A published outbox row whose stored position does not hold its event in the log read. */
export interface MissingRow {
  event_id: string;
  broker_partition: number;
  broker_offset: string;
  found: string | null;
}

/**
 * The rows of `topic` marked published that the log as `brokers` serve it does not hold where stored. The rows are
 * taken before the log's ends: a row is marked published only after its acks=all acknowledgement, which came once
 * the high watermark had passed its record, so each row taken lies below the ends read afterwards.
 */
export async function publishedMissingFrom(sql: Sql, brokers: string, topic: string): Promise<MissingRow[]> {
  const rows = await sql<{ event_id: string; broker_partition: number; broker_offset: string }[]>`
    SELECT event_id::text, broker_partition, broker_offset::text FROM message_outbox
    WHERE topic = ${topic} AND status = 'published'`;
  const log = await readTopicLog(brokers, topic);
  if (rows.length === 0) throw new Error(`no published row of ${topic}: nothing to check against the log`);
  return rows
    .map((r) => ({ ...r, found: log.get(`${r.broker_partition}:${r.broker_offset}`) ?? null }))
    .filter((r) => r.found !== r.event_id);
}
