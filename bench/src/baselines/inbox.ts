import { newEventId, type Sql } from '@postbox/engine';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchDatabase, perSecond, progressBar, timed } from '../support.ts';

/**
 * The raw inbox transaction, by hand: inbox insert ON CONFLICT DO NOTHING + projection upsert. One transaction per
 * event at 8 connections (for one window), and 500 events a transaction at 1 and 2 connections (N events).
 * They bound the consumer: per event ↔ maxBatchEvents 1, batched ↔ shared transactions.
 */
export async function inboxBaseline({ options, report }: Bench): Promise<void> {
  const db = await benchDatabase(8);
  try {
    let n = 0;
    const perEvent = await timed(
      8,
      options.windowMs,
      async () => (await inboxTransaction(db.sql, 'raw-one', [n++]), 1),
      progressBar('raw inbox, one tx per event, 8 conn.', options.windowMs),
    );
    const byConnections: Record<string, number> = {};
    for (const connections of [1, 2])
      byConnections[connections] = await batched(db.sql, `raw-batch-${connections}`, options.events, connections);
    const best = Math.max(...Object.values(byConnections));
    report.results.baselines.inboxPerEvent = {
      eventsPerSecond: perSecond(perEvent.done, perEvent.seconds),
      events: perEvent.done,
      seconds: perEvent.seconds,
      connections: 8,
    };
    report.results.baselines.inboxBatched = {
      eventsPerSecond: best,
      events: options.events,
      batch: 500,
      byConnections,
    };
    report.row(
      'baseline',
      'raw inbox, one transaction per event (8 conn.)',
      rate(report.baseline('inboxPerEvent')!),
      [],
      'inbox insert + projection upsert',
    );
    report.row(
      'baseline',
      'raw inbox, 500 events a transaction',
      rate(best),
      [],
      `1 conn. ${rate(byConnections[1]!)}, 2 conn. ${rate(byConnections[2]!)}`,
    );
  } finally {
    await db.drop();
  }
}

async function batched(sql: Sql, consumer: string, events: number, connections: number): Promise<number> {
  const bar = progressBar(`raw inbox, 500 a tx, ${connections} conn.`, events);
  let next = 0;
  let done = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (next < events) {
        const from = next;
        next += 500;
        const ids = Array.from({ length: Math.min(500, events - from) }, (_, k) => from + k);
        await inboxTransaction(sql, consumer, ids);
        bar((done += ids.length));
      }
    }),
  );
  return perSecond(events, (performance.now() - started) / 1000);
}

/** One transaction: the inbox rows and the projection rows of these events (one aggregate each). */
async function inboxTransaction(sql: Sql, consumer: string, numbers: number[]): Promise<void> {
  const aggregates = numbers.map((i) => `${consumer}-${i}`);
  await sql.begin(async (tx) => {
    await tx`
      INSERT INTO message_inbox (consumer_name, event_id, aggregate_id, aggregate_version)
      SELECT ${consumer}, e, a, 1 FROM unnest(${numbers.map(() => newEventId())}::uuid[], ${aggregates}::text[]) AS u(e, a)
      ON CONFLICT DO NOTHING`;
    await tx`
      INSERT INTO demo_order_projection (order_id, state, version, applied_count, updated_at)
      SELECT a, 'placed', 1, 1, clock_timestamp() FROM unnest(${aggregates}::text[]) AS u(a)
      ON CONFLICT (order_id) DO UPDATE SET version = EXCLUDED.version, applied_count = demo_order_projection.applied_count + 1`;
  });
}
