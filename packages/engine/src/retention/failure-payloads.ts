import type { Sql } from '../db/connect.ts';
import { purgeFailurePayloads } from '../queries/failure-purge.ts';

/** Payloads of closed failures past their window, in batches until none is left (open ones stay replayable). */
export async function purgeClosedFailurePayloads(sql: Sql, before: Date): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await purgeFailurePayloads(sql, before, 1000, true);
    total += n;
    if (n === 0) return total;
  }
}
