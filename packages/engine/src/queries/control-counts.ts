import type { Queryable } from '../db/connect.ts';

export interface TopicBacklogRow {
  topic: string;
  pending: number;
  publishing: number;
  failed: number;
  oldest_pending_ms: number | null;
}

/**
 * Unpublished and failed outbox rows per topic, with the age of the oldest unpublished one (`publishing` as the
 * message_outbox_state view derives it). Reads the partial ready and failed indexes only. Locks: none.
 */
export async function outboxByTopic(sql: Queryable): Promise<TopicBacklogRow[]> {
  const rows = await sql<TopicBacklogRow[]>`
    WITH live AS (
      SELECT topic, count(*) FILTER (WHERE status = 'pending')::int AS pending,
             count(*) FILTER (WHERE status = 'publishing')::int AS publishing,
             (extract(epoch FROM now() - min(created_at)) * 1000)::float8 AS oldest_pending_ms
      FROM message_outbox_state WHERE stored_status IN ('pending', 'publishing') GROUP BY topic
    ), dead AS (
      SELECT topic, count(*)::int AS failed FROM message_outbox WHERE status = 'failed' GROUP BY topic
    )
    SELECT coalesce(l.topic, d.topic) AS topic, coalesce(l.pending, 0) AS pending, coalesce(l.publishing, 0) AS publishing,
           coalesce(d.failed, 0) AS failed, l.oldest_pending_ms
    FROM live l FULL JOIN dead d ON d.topic = l.topic
    ORDER BY 1`;
  return rows.map((r) => ({
    ...r,
    oldest_pending_ms: r.oldest_pending_ms === null ? null : Math.round(r.oldest_pending_ms),
  }));
}

export interface ConsumerCountsRow {
  consumer_name: string;
  retries_waiting: number;
  parked: number;
  blocked: number;
  failures: number;
}

/** Per consumer: scheduled retries, parked events, blocked aggregates, open failures. Locks: none. */
export async function consumerCounts(sql: Queryable): Promise<Map<string, ConsumerCountsRow>> {
  const rows = await sql<ConsumerCountsRow[]>`
    WITH r AS (SELECT consumer_name, count(*)::int AS n FROM message_retry WHERE status = 'scheduled' GROUP BY 1),
         p AS (SELECT consumer_name, count(*)::int AS n FROM message_parked GROUP BY 1),
         b AS (SELECT consumer_name, count(*)::int AS n FROM consumer_blocked_aggregate GROUP BY 1),
         f AS (SELECT consumer_name, count(*)::int AS n FROM message_failure WHERE status = 'open' GROUP BY 1),
         names AS (SELECT consumer_name FROM r UNION SELECT consumer_name FROM p UNION SELECT consumer_name FROM b
                   UNION SELECT consumer_name FROM f UNION SELECT consumer_name FROM consumer_registry)
    SELECT names.consumer_name, coalesce(r.n, 0) AS retries_waiting, coalesce(p.n, 0) AS parked,
           coalesce(b.n, 0) AS blocked, coalesce(f.n, 0) AS failures
    FROM names LEFT JOIN r USING (consumer_name) LEFT JOIN p USING (consumer_name)
               LEFT JOIN b USING (consumer_name) LEFT JOIN f USING (consumer_name)`;
  return new Map(rows.map((r) => [r.consumer_name, r]));
}
