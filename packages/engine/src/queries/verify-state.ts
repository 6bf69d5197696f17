import type { Queryable } from '../db/connect.ts';
import type { ConsumerFacts, FailureFact, OutboxFact } from '../records/observation.ts';

/**
 * What the verifier reads from PostgreSQL (verify/collect.ts runs these in one REPEATABLE READ, READ ONLY
 * transaction, so they are one snapshot). None takes a lock beyond what a plain SELECT takes.
 */

/** Outbox rows of the given topics, status and lease as message_outbox_state derives them. Parameters: topics. Rows: one per event. */
export async function outboxFacts(sql: Queryable, topics: string[]): Promise<OutboxFact[]> {
  const rows = await sql<
    Array<{
      event_id: string;
      aggregate_id: string;
      version: string;
      topic: string;
      status: OutboxFact['status'];
      attempts: number;
      broker_partition: number | null;
      broker_offset: string | null;
      available_at: Date;
      lease_until: Date | null;
    }>
  >`
    SELECT event_id, aggregate_id, aggregate_version::text AS version, topic, status, attempts, broker_partition,
           broker_offset::text AS broker_offset, available_at, lease_until
    FROM message_outbox_state WHERE topic = ANY(${topics}::text[])`;
  return rows.map((r) => ({
    eventId: r.event_id,
    aggregateId: r.aggregate_id,
    version: Number(r.version),
    topic: r.topic,
    status: r.status,
    attempts: r.attempts,
    partition: r.broker_partition,
    offset: r.broker_offset,
    availableAt: r.available_at.getTime(),
    leaseUntil: r.lease_until?.getTime() ?? null,
  }));
}

/** The consumer's inbox (event, version, duplicate count). Parameters: consumer. */
export async function inboxFacts(sql: Queryable, consumer: string): Promise<ConsumerFacts['inbox']> {
  const rows = await sql<Array<{ event_id: string; aggregate_id: string; version: string | null; duplicates: number }>>`
    SELECT event_id, aggregate_id, aggregate_version::text AS version, duplicate_deliveries AS duplicates
    FROM message_inbox WHERE consumer_name = ${consumer}`;
  return rows.map((r) => ({
    eventId: r.event_id,
    aggregateId: r.aggregate_id,
    version: r.version === null ? null : Number(r.version),
    duplicates: r.duplicates,
  }));
}

/** The version gate's last applied version per aggregate. Parameters: consumer. */
export async function versionFacts(sql: Queryable, consumer: string): Promise<ConsumerFacts['versions']> {
  const rows = await sql<Array<{ aggregate_id: string; last_version: string }>>`
    SELECT aggregate_id, last_version::text FROM consumer_aggregate_version WHERE consumer_name = ${consumer}`;
  return rows.map((r) => ({ aggregateId: r.aggregate_id, lastVersion: Number(r.last_version) }));
}

/** Every failure-store row of the consumer, whatever its status. Parameters: consumer. */
export async function failureFacts(sql: Queryable, consumer: string): Promise<FailureFact[]> {
  const rows = await sql<
    Array<{
      event_id: string | null;
      aggregate_id: string | null;
      version: string | null;
      topic: string | null;
      broker_partition: number | null;
      broker_offset: string | null;
      error_code: string;
      status: FailureFact['status'];
    }>
  >`
    SELECT event_id, aggregate_id, aggregate_version::text AS version, topic, broker_partition, broker_offset::text AS broker_offset,
           error_code, status
    FROM message_failure WHERE consumer_name = ${consumer}`;
  return rows.map((r) => ({
    eventId: r.event_id,
    aggregateId: r.aggregate_id,
    version: r.version === null ? null : Number(r.version),
    topic: r.topic,
    partition: r.broker_partition,
    offset: r.broker_offset,
    code: r.error_code,
    status: r.status,
  }));
}

/** The consumer's retry ledger rows. Parameters: consumer. */
export async function retryFacts(sql: Queryable, consumer: string): Promise<ConsumerFacts['retries']> {
  const rows = await sql<
    Array<{ event_id: string; status: ConsumerFacts['retries'][number]['status']; next_attempt_at: Date }>
  >`
    SELECT event_id, status, next_attempt_at FROM message_retry WHERE consumer_name = ${consumer}`;
  return rows.map((r) => ({ eventId: r.event_id, status: r.status, nextAttemptAt: r.next_attempt_at.getTime() }));
}

/** Parked events of the consumer. Parameters: consumer. */
export async function parkedFacts(sql: Queryable, consumer: string): Promise<ConsumerFacts['parked']> {
  const rows = await sql<Array<{ event_id: string; aggregate_id: string; version: string; parked_at: Date }>>`
    SELECT event_id, aggregate_id, aggregate_version::text AS version, parked_at FROM message_parked WHERE consumer_name = ${consumer}`;
  return rows.map((r) => ({
    eventId: r.event_id,
    aggregateId: r.aggregate_id,
    version: Number(r.version),
    parkedAt: r.parked_at.getTime(),
  }));
}

/** Blocked aggregates of the consumer. Parameters: consumer. */
export async function blockedFacts(sql: Queryable, consumer: string): Promise<ConsumerFacts['blocked']> {
  const rows = await sql<Array<{ aggregate_id: string; event_id: string | null; reason: 'retrying' | 'failed' }>>`
    SELECT aggregate_id, event_id, reason FROM consumer_blocked_aggregate WHERE consumer_name = ${consumer}`;
  return rows.map((r) => ({ aggregateId: r.aggregate_id, eventId: r.event_id, reason: r.reason }));
}
