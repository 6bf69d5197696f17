import { createKafka, toKafkaHeaders, toRecord } from '@postbox/engine/kafka';
import { Partitioners } from 'kafkajs';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchDatabase, benchTopic, deleteTopics, kafka, perSecond, progressBar, timed } from '../support.ts';
import { fillOutbox } from '../workload/fill.ts';

/**
 * The naive relay: one row per claim, publish, update. Each of 4 loops claims the head row (FOR UPDATE SKIP
 * LOCKED, in the order the ready index serves), marks it publishing, commits, sends it alone (acks = all,
 * idempotent) and marks it published. What a relay without batching does, on the same outbox and broker.
 */
export async function naiveRelayBaseline({ options, report }: Bench): Promise<void> {
  const db = await benchDatabase(8);
  const topic = await benchTopic('naive', options.partitions);
  const producer = createKafka(kafka).producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
  });
  try {
    await fillOutbox(db.sql, { topic, events: options.events, payload: options.payload });
    await db.sql`VACUUM ANALYZE message_outbox`;
    await producer.connect();
    const run = await timed(
      4,
      options.windowMs,
      async () => {
        const [row] = await db.sql.begin(async (tx) => {
          const rows = await tx`
          SELECT event_id, event_type, schema_version, aggregate_id, aggregate_version::text AS aggregate_version, topic, payload, producer,
                 occurred_at, traceparent, tracestate, deadline, attempts
          FROM message_outbox WHERE status IN ('pending', 'publishing') AND (status = 'pending' OR lease_until < now())
          ORDER BY lane, seq LIMIT 1 FOR UPDATE SKIP LOCKED`;
          if (rows.length > 0)
            await tx`UPDATE message_outbox SET status = 'publishing', lease_until = now() + interval '30 s', attempts = attempts + 1 WHERE event_id = ${rows[0]!.event_id}`;
          return rows;
        });
        if (!row) return 0;
        const record = toRecord(row as never);
        await producer.send({
          topic: record.topic,
          acks: -1,
          messages: [{ key: record.key, value: record.value, headers: toKafkaHeaders(record.headers) }],
        });
        await db.sql`UPDATE message_outbox SET status = 'published', published_at = now(), lease_until = NULL WHERE event_id = ${row.event_id}`;
        return 1;
      },
      progressBar('naive relay (1 row a cycle, 4 loops)', options.windowMs),
    );
    const eventsPerSecond = perSecond(run.done, run.seconds);
    report.results.baselines.naiveRelay = { eventsPerSecond, events: run.done, seconds: run.seconds, loops: 4 };
    report.row(
      'baseline',
      'naive relay (1 row: claim, publish, update; 4 loops)',
      rate(eventsPerSecond),
      [],
      'same outbox, same broker',
    );
  } finally {
    await producer.disconnect().catch(() => {});
    await db.drop();
    await deleteTopics([topic]);
  }
}
