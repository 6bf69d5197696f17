import type { Queryable } from '../db/connect.ts';

export interface OutboxEventRow {
  event_id: string;
  event_type: string;
  schema_version: number;
  aggregate_id: string;
  aggregate_version: number;
  topic: string;
  status: 'pending' | 'publishing' | 'published' | 'failed';
  attempts: number;
  available_at: Date;
  published_at: Date | null;
  broker_partition: number | null;
  broker_offset: string | null;
  last_error: string | null;
  occurred_at: Date;
  created_at: Date;
  traceparent: string | null;
}

/** The outbox row of an event, without its payload; its status as message_outbox_state derives it. Locks: none. */
export async function readOutboxEvent(sql: Queryable, eventId: string): Promise<OutboxEventRow | undefined> {
  const [row] = await sql<OutboxEventRow[]>`
    SELECT o.event_id, o.event_type, o.schema_version, o.aggregate_id, o.aggregate_version::int, o.topic, s.status,
           o.attempts, o.available_at, o.published_at, o.broker_partition, o.broker_offset::text, o.last_error,
           o.occurred_at, o.created_at, o.traceparent
    FROM message_outbox o JOIN message_outbox_state s USING (event_id) WHERE o.event_id = ${eventId}`;
  return row;
}

/** One consumer's traces of one event: every table a stage leaves a row in. */
export interface ConsumerEventRow {
  consumer_name: string;
  topics: string[] | null;
  processed_at: Date | null;
  duplicate_deliveries: number | null;
  inbox_aggregate_id: string | null;
  parked_at: Date | null;
  retry_status: string | null;
  retry_attempt: number | null;
  retry_next_at: Date | null;
  retry_error_code: string | null;
  failure_id: number | null;
  failure_status: string | null;
  failure_error_code: string | null;
  last_version: number | null;
}

/**
 * Per consumer (registered, or holding any row of this event): inbox, parked, retry ledger, latest failure and
 * the aggregate's applied version. `aggregate` (from the outbox or an inbox row) finds parked rows by key.
 * Locks: none.
 */
export async function consumerEventRows(
  sql: Queryable,
  eventId: string,
  aggregate: string | null,
): Promise<ConsumerEventRow[]> {
  return [
    ...(await sql<ConsumerEventRow[]>`
    WITH names AS (
      SELECT consumer_name FROM consumer_registry
      UNION SELECT consumer_name FROM message_inbox WHERE event_id = ${eventId}
      UNION SELECT consumer_name FROM message_retry WHERE event_id = ${eventId}
      UNION SELECT consumer_name FROM message_failure WHERE event_id = ${eventId}
    )
    SELECT n.consumer_name, reg.topics, i.processed_at, i.duplicate_deliveries, i.aggregate_id AS inbox_aggregate_id,
           (SELECT p.parked_at FROM message_parked p
             WHERE p.consumer_name = n.consumer_name AND p.aggregate_id = coalesce(i.aggregate_id, ${aggregate}) AND p.event_id = ${eventId}
             LIMIT 1) AS parked_at,
           r.status AS retry_status, r.attempt AS retry_attempt, r.next_attempt_at AS retry_next_at, r.last_error_code AS retry_error_code,
           f.failure_id, f.status AS failure_status, f.error_code AS failure_error_code,
           (SELECT v.last_version::int FROM consumer_aggregate_version v
             WHERE v.consumer_name = n.consumer_name AND v.aggregate_id = coalesce(i.aggregate_id, ${aggregate})) AS last_version
    FROM names n
    LEFT JOIN consumer_registry reg ON reg.consumer_name = n.consumer_name
    LEFT JOIN message_inbox i ON i.consumer_name = n.consumer_name AND i.event_id = ${eventId}
    LEFT JOIN message_retry r ON r.consumer_name = n.consumer_name AND r.event_id = ${eventId}
    LEFT JOIN LATERAL (
      SELECT failure_id::int, status, error_code FROM message_failure
      WHERE consumer_name = n.consumer_name AND event_id = ${eventId} ORDER BY failure_id DESC LIMIT 1
    ) f ON true
    ORDER BY n.consumer_name`),
  ];
}
