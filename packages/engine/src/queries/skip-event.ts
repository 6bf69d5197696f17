import type { Queryable } from '../db/connect.ts';
import type { StoredRecord } from '../records/stored-record.ts';

export interface SkipTarget {
  failure_id: number | null;
  retry_scheduled: boolean;
  aggregate_id: string;
  aggregate_version: number;
  last_version: number | null;
}

/**
 * The head an operator wants to skip: an open failure or a scheduled retry of the event, and the aggregate's
 * applied version. Locks: the failure row, the ledger row and the aggregate's version row, so a retry cannot run
 * while the skip decides.
 */
export async function lockSkipTarget(
  tx: Queryable,
  consumer: string,
  eventId: string,
): Promise<SkipTarget | undefined> {
  const [f] = await tx<{ failure_id: number; aggregate_id: string | null; aggregate_version: number | null }[]>`
    SELECT failure_id::int, aggregate_id, aggregate_version::int FROM message_failure
    WHERE consumer_name = ${consumer} AND event_id = ${eventId} AND status IN ('open', 'expired')
    ORDER BY failure_id DESC LIMIT 1 FOR UPDATE`;
  const [r] = await tx<{ aggregate_id: string; aggregate_version: number }[]>`
    SELECT aggregate_id, aggregate_version::int FROM message_retry
    WHERE consumer_name = ${consumer} AND event_id = ${eventId} AND status = 'scheduled' FOR UPDATE`;
  const aggregate_id = f?.aggregate_id ?? r?.aggregate_id ?? null;
  const aggregate_version = f?.aggregate_version ?? r?.aggregate_version ?? null;
  const row =
    aggregate_id === null || aggregate_version === null
      ? undefined
      : { failure_id: f?.failure_id ?? null, retry_scheduled: r !== undefined, aggregate_id, aggregate_version };
  if (!row) return undefined;
  const [v] = await tx<{ last_version: number }[]>`
    SELECT last_version::int FROM consumer_aggregate_version
    WHERE consumer_name = ${consumer} AND aggregate_id = ${row.aggregate_id} FOR UPDATE`;
  return { ...row, last_version: v?.last_version ?? null };
}

/**
 * Skips the head: the consumer moves past its version without the side effect, its failure is 'skipped', its
 * retry settled, its inbox row written (a redelivery is a duplicate) and its block lifted.
 * Locks: the rows written.
 */
export async function markSkipped(tx: Queryable, consumer: string, eventId: string, t: SkipTarget): Promise<void> {
  await tx`
    INSERT INTO consumer_aggregate_version (consumer_name, aggregate_id, last_version)
    VALUES (${consumer}, ${t.aggregate_id}, ${t.aggregate_version})
    ON CONFLICT (consumer_name, aggregate_id) DO UPDATE
      SET last_version = greatest(consumer_aggregate_version.last_version, EXCLUDED.last_version), updated_at = now()`;
  await tx`
    INSERT INTO message_inbox (consumer_name, event_id, aggregate_id, aggregate_version)
    VALUES (${consumer}, ${eventId}, ${t.aggregate_id}, ${t.aggregate_version})
    ON CONFLICT (consumer_name, event_id) DO NOTHING`;
  await tx`UPDATE message_failure SET status = 'skipped' WHERE consumer_name = ${consumer} AND event_id = ${eventId} AND status IN ('open', 'expired')`;
  await tx`UPDATE message_retry SET status = 'done', updated_at = now() WHERE consumer_name = ${consumer} AND event_id = ${eventId} AND status = 'scheduled'`;
  await tx`DELETE FROM consumer_blocked_aggregate WHERE consumer_name = ${consumer} AND aggregate_id = ${t.aggregate_id}`;
}

/**
 * Takes the parked successor (version + 1) off the parked table so it can run as a retry. Its inbox row goes
 * too: it was written when the event parked, and the retry must not find it a duplicate; the retry writes it
 * again in the transaction that applies it. Locks: the parked and inbox rows.
 */
export async function takeParkedSuccessor(
  tx: Queryable,
  consumer: string,
  aggregateId: string,
  version: number,
): Promise<{ event_id: string; topic: string; record: StoredRecord } | undefined> {
  const [row] = await tx<{ event_id: string; topic: string; record: StoredRecord }[]>`
    DELETE FROM message_parked
    WHERE consumer_name = ${consumer} AND aggregate_id = ${aggregateId} AND aggregate_version = ${version + 1}
    RETURNING event_id, topic, record`;
  if (!row) return undefined;
  await tx`DELETE FROM message_inbox WHERE consumer_name = ${consumer} AND event_id = ${row.event_id}`;
  return row;
}
