import { newEventId, type Sql } from '@postbox/engine';
import { KafkaPublisher, toRecord } from '@postbox/engine/kafka';
import { kafka } from '../support.ts';

/** The shape of every bench event: aggregate `<prefix>-<i mod aggregates>`, versions 1, 2, … in sequence order. */
export interface EventShape {
  topic: string;
  events: number;
  /** Bytes of the data JSON, `{"pad":"xxx…"}`. */
  payload: number;
  /** @defaultValue events / 10 (ten versions per aggregate) */
  aggregates?: number;
  /** @defaultValue 'a' */
  prefix?: string;
}

/** Rows as they stand after a past day: ids of that day, already sent (the retention scenario's history). */
export interface HistoryShape {
  /** The first event id's millisecond; the ids follow it a millisecond apart. */
  idTime: Date;
}

const aggregatesOf = (s: EventShape) => Math.max(1, s.aggregates ?? Math.floor(s.events / 10));

/** The data JSON the engine would store for a bench event (encodeData of `{ pad }`). */
export function benchData(payload: number): Buffer {
  return Buffer.from(JSON.stringify({ pad: 'x'.repeat(Math.max(0, payload - 10)) }));
}

/**
 * Fills the outbox server-side (INSERT … SELECT generate_series), 50,000 rows a statement, one transaction, so that a 1M backlog
 * takes seconds rather than minutes. Rows are exactly what enqueueMany writes: a UUIDv7 event id (millisecond
 * time + random), the data bytes, status pending — or, given `idTime`, a past day's rows already published then.
 * Parameters: the shape. Locks: the new rows.
 */
export async function fillOutbox(
  sql: Sql,
  shape: EventShape & Partial<HistoryShape>,
  progress?: (done: number) => void,
): Promise<void> {
  const aggregates = aggregatesOf(shape);
  const prefix = shape.prefix ?? 'a';
  const pad = Math.max(0, shape.payload - 10);
  const chunk = 50_000;
  const history = shape.idTime?.getTime() ?? null;
  // One transaction: the rows appear at once, so a relay already running sees a full backlog, not a trickle.
  await sql.begin(async (tx) => {
    for (let from = 0; from < shape.events; from += chunk) {
      const to = Math.min(shape.events, from + chunk) - 1;
      await tx`
        INSERT INTO message_outbox (event_id, event_type, schema_version, aggregate_id, aggregate_version, topic, payload, producer,
                                    occurred_at, status, published_at)
        SELECT (substr(t.h, 1, 8) || '-' || substr(t.h, 9, 4) || '-7' || substr(gen_random_uuid()::text, 16))::uuid,
               'OrderPlaced', 1, ${prefix} || '-' || (i % ${aggregates}), i / ${aggregates} + 1, ${shape.topic},
               convert_to('{"pad":"' || repeat('x', ${pad}) || '"}', 'UTF8'), 'bench', t.at,
               ${history === null ? 'pending' : 'published'}, CASE WHEN ${history !== null} THEN t.at END
        FROM generate_series(${from}::int, ${to}::int) AS i,
             LATERAL (SELECT coalesce(${history}::bigint + i, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS ms) AS m,
             LATERAL (SELECT lpad(to_hex(m.ms), 12, '0') AS h, to_timestamp(m.ms / 1000.0) AS at) AS t`;
      progress?.(to + 1);
    }
  });
}

/**
 * Produces bench events straight to the topic as the relay would (CloudEvents binary mode via the engine's
 * toRecord, the engine's KafkaPublisher: acks = all, idempotent), in batches of 500. For consumer-only runs.
 */
export async function fillTopic(shape: EventShape, progress?: (done: number) => void): Promise<void> {
  const aggregates = aggregatesOf(shape);
  const prefix = shape.prefix ?? 'a';
  const payload = benchData(shape.payload);
  const publisher = new KafkaPublisher({ ...kafka, clientId: 'postbox-bench-fill' });
  try {
    const occurred = new Date();
    for (let from = 0; from < shape.events; from += 500) {
      const n = Math.min(500, shape.events - from);
      const messages = Array.from({ length: n }, (_, k) => {
        const i = from + k;
        return toRecord({
          event_id: newEventId(),
          event_type: 'OrderPlaced',
          schema_version: 1,
          aggregate_id: `${prefix}-${i % aggregates}`,
          aggregate_version: String(Math.floor(i / aggregates) + 1),
          topic: shape.topic,
          payload,
          producer: 'bench',
          occurred_at: occurred,
          traceparent: null,
          tracestate: null,
          deadline: null,
          attempts: 0,
        });
      });
      const outcomes = await publisher.publish(messages);
      const failed = outcomes.find((o) => !o.ok);
      if (failed && !failed.ok) throw new Error(`bench: could not fill topic ${shape.topic}`, { cause: failed.error });
      progress?.(from + n);
    }
  } finally {
    await publisher.close();
  }
}
