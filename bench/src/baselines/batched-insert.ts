import { newEventId } from '@postbox/engine';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchDatabase, perSecond, progressBar } from '../support.ts';
import { benchData } from '../workload/fill.ts';

/** Raw multi-row INSERT of outbox rows, 500 a statement (one transaction each), at 1 and 4 connections. */
export async function batchedInsertBaseline({ options, report }: Bench): Promise<void> {
  const db = await benchDatabase(4);
  const payload = benchData(options.payload);
  try {
    const byConnections: Record<string, number> = {};
    for (const connections of [1, 4]) {
      const bar = progressBar(`raw batched insert, ${connections} conn.`, options.events);
      let next = 0;
      let done = 0;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: connections }, async () => {
          while (next < options.events) {
            const from = next;
            next += 500;
            const rows = Array.from({ length: Math.min(500, options.events - from) }, (_, k) => ({
              event_id: newEventId(),
              event_type: 'OrderPlaced',
              schema_version: 1,
              aggregate_id: `b${connections}-${from + k}`,
              aggregate_version: 1,
              topic: 'bench.unused',
              payload,
              producer: 'bench',
              occurred_at: new Date(),
            }));
            await db.sql`INSERT INTO message_outbox ${db.sql(rows)}`;
            bar((done += rows.length));
          }
        }),
      );
      byConnections[connections] = perSecond(options.events, (performance.now() - started) / 1000);
    }
    const best = Math.max(...Object.values(byConnections));
    report.results.baselines.batchedInsert = {
      eventsPerSecond: best,
      batch: 500,
      byConnections,
      events: options.events,
    };
    report.row(
      'baseline',
      'raw batched insert (500 rows a statement)',
      rate(best),
      [],
      `1 conn. ${rate(byConnections[1]!)}, 4 conn. ${rate(byConnections[4]!)}`,
    );
  } finally {
    await db.drop();
  }
}
