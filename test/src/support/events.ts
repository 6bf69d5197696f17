import { enqueueMany, type EventInput, type Sql } from '@postbox/engine';
import type { ReadRecord } from './kafka.ts';

/** Writes `perAggregate` versions for each of `aggregates` aggregates, interleaved, in transactions of `chunk`. */
export async function writeEvents(
  sql: Sql,
  topic: string,
  aggregates: number,
  perAggregate: number,
  chunk = 500,
  prefix = 'agg',
): Promise<number> {
  const all: EventInput[] = [];
  for (let v = 1; v <= perAggregate; v++) {
    for (let a = 0; a < aggregates; a++) {
      all.push({
        event_type: 'TestEvent',
        aggregate_id: `${prefix}-${a}`,
        aggregate_version: v,
        data: { a, v, pad: 'x'.repeat(200) },
      });
    }
  }
  for (let i = 0; i < all.length; i += chunk) {
    await sql.begin((tx) => enqueueMany(tx, all.slice(i, i + chunk), { topic, producer: 'test' }));
  }
  return all.length;
}

export interface TopicCheck {
  distinct: number;
  duplicates: number;
  /** Aggregates whose first deliveries are not exactly 1, 2, 3, … in offset order. */
  outOfOrder: string[];
}

/** Jepsen-style read check: one value per offset, duplicates counted, per-key order of first deliveries. */
export function checkTopic(records: ReadRecord[]): TopicCheck {
  const seen = new Set<string>();
  const versions = new Map<string, number[]>();
  let duplicates = 0;
  for (const r of records) {
    const id = r.headers.ce_id!;
    if (seen.has(id)) {
      duplicates++;
      continue;
    }
    seen.add(id);
    const list = versions.get(r.key) ?? [];
    list.push(Number(r.headers.ce_aggregateversion));
    versions.set(r.key, list);
  }
  const outOfOrder = [...versions].filter(([, vs]) => vs.some((v, i) => v !== i + 1)).map(([k]) => k);
  return { distinct: seen.size, duplicates, outOfOrder };
}
