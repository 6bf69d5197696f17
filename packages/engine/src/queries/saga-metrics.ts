import type { Queryable } from '../db/connect.ts';

export interface SagaGaugeFacts {
  byStatus: Array<{ status: string; count: number }>;
  /** Age of the oldest saga still running, resolving or compensating (s); null when none. */
  oldestRunningS: number | null;
  /** Start-to-end time of the sagas that ended in the last five minutes, by how they ended (s). */
  timeToEnd: Array<{ status: string; p50: number; p99: number }>;
}

/** How long the saga gauges' facts are kept before they are read again (telemetry/metrics.ts caches them). */
export const SAGA_GAUGE_REFRESH_MS = 60_000;

/**
 * What the saga gauges show (telemetry/metrics.ts, observeSagas), read at collection time, at most every SAGA_GAUGE_REFRESH_MS (the count reads the whole table).
 * Parameters: none. Returns: counts by status, the oldest running age, recent time-to-end quantiles. Locks: none.
 */
export async function sagaGaugeFacts(sql: Queryable): Promise<SagaGaugeFacts> {
  const byStatus = await sql<Array<{ status: string; n: string }>>`
    SELECT status, count(*)::text AS n FROM saga_instance GROUP BY status`;
  const [oldest] = await sql<Array<{ age: number | null }>>`
    SELECT extract(epoch FROM now() - min(created_at))::float8 AS age
    FROM saga_instance WHERE status IN ('running', 'resolving', 'compensating')`;
  const ended = await sql<Array<{ status: string; p50: number; p99: number }>>`
    SELECT status,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM updated_at - created_at))::float8 AS p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM updated_at - created_at))::float8 AS p99
    FROM saga_instance
    WHERE status IN ('completed', 'compensated', 'closed_manually') AND updated_at > now() - interval '5 minutes'
    GROUP BY status`;
  return {
    byStatus: byStatus.map((r) => ({ status: r.status, count: Number(r.n) })),
    oldestRunningS: oldest?.age ?? null,
    timeToEnd: ended,
  };
}
