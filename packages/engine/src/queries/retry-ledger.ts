import type { StoredRecord } from '../records/stored-record.ts';
import type { PayloadKeyRing } from '../crypto/payload-keys.ts';
import { sealRecord, type SealedColumns } from '../crypto/row-seal.ts';
import type { Queryable } from '../db/connect.ts';

/**
 * One scheduled retry as the ledger holds it. `record` is the broker record as received (value base64), or null
 * when it is sealed (`openRecord` in crypto/row-seal.ts gives it either way).
 */
export interface LedgerRow extends SealedColumns {
  consumer_name: string;
  event_id: string;
  aggregate_id: string;
  aggregate_version: string;
  topic: string;
  record: unknown;
  attempt: number;
  next_attempt_at: Date;
  first_failed_at: Date;
  deadline: Date | null;
  last_error_code: string;
  last_error: string;
  status: 'scheduled' | 'done' | 'exhausted' | 'expired';
}

export interface ScheduleRetry {
  consumer: string;
  eventId: string;
  aggregateId: string;
  aggregateVersion: number;
  topic: string;
  record: StoredRecord;
  /** The attempt that will run next (2 after the first delivery failed). */
  attempt: number;
  delayMs: number;
  deadline: Date | null;
  errorCode: string;
  error: string;
  /** A replay starts a fresh budget: first_failed_at becomes now. */
  resetBudget?: boolean;
}

/**
 * Records (or advances) the retry of one event: the truth of the durable schedule, written in the transaction
 * that settles the failed attempt. first_failed_at is kept from the first failure. With a key ring the record is
 * stored sealed. Returns: the row's next_attempt_at. Locks: the ledger row.
 */
export async function scheduleRetry(
  tx: Queryable,
  r: ScheduleRetry,
  keys: PayloadKeyRing | null = null,
): Promise<Date> {
  const sealed = keys ? sealRecord(keys, r.consumer, r.eventId, r.record) : null;
  const [row] = await tx<{ next_attempt_at: Date }[]>`
    INSERT INTO message_retry (consumer_name, event_id, aggregate_id, aggregate_version, topic, record, key_id, sealed,
                               attempt, next_attempt_at, first_failed_at, deadline, last_error_code, last_error, status)
    VALUES (${r.consumer}, ${r.eventId}, ${r.aggregateId}, ${r.aggregateVersion}, ${r.topic},
            ${sealed ? null : tx.json(r.record as never)}, ${sealed?.keyId ?? null}, ${sealed?.bytes ?? null}, ${r.attempt}, now() + ${r.delayMs} * interval '1 millisecond', now(), ${r.deadline}, ${r.errorCode},
            ${r.error.slice(0, 2000)}, 'scheduled')
    ON CONFLICT (consumer_name, event_id) DO UPDATE
      SET attempt = excluded.attempt, next_attempt_at = excluded.next_attempt_at, last_error_code = excluded.last_error_code,
          last_error = excluded.last_error, status = 'scheduled', updated_at = now(), record = excluded.record,
          key_id = excluded.key_id, sealed = excluded.sealed,
          first_failed_at = CASE WHEN ${r.resetBudget ?? false} THEN now() ELSE message_retry.first_failed_at END
    RETURNING next_attempt_at`;
  return row!.next_attempt_at;
}

/**
 * Reads a ledger row. Outside a transaction the lock ends with the statement; two deliveries of one job that
 * both run the record are absorbed by the inbox. Locks: the row (FOR UPDATE), inside a transaction.
 */
export async function lockLedgerRow(tx: Queryable, consumer: string, eventId: string): Promise<LedgerRow | undefined> {
  const [row] = await tx<LedgerRow[]>`
    SELECT consumer_name, event_id, aggregate_id, aggregate_version::text, topic, record, key_id, sealed, attempt, next_attempt_at,
           first_failed_at, deadline, last_error_code, last_error, status
    FROM message_retry WHERE consumer_name = ${consumer} AND event_id = ${eventId}
    FOR UPDATE`;
  return row;
}

/** Ends a ledger row (done, exhausted, expired). Locks: the row. */
export async function settleLedgerRow(
  tx: Queryable,
  consumer: string,
  eventId: string,
  status: 'done' | 'exhausted' | 'expired',
): Promise<void> {
  await tx`
    UPDATE message_retry SET status = ${status}, updated_at = now()
    WHERE consumer_name = ${consumer} AND event_id = ${eventId}`;
}

/**
 * A consumer's scheduled rows, for reconciliation against the scheduler (a Redis that lost its data loses no
 * retry). Returns: up to `limit` rows after event id `after` (keyset paging). Locks: none.
 */
export async function scheduledLedgerRows(
  sql: Queryable,
  consumer: string,
  limit: number,
  after: string | null,
): Promise<Array<{ consumer_name: string; event_id: string; attempt: number; next_attempt_at: Date }>> {
  return sql`
    SELECT consumer_name, event_id, attempt, next_attempt_at
    FROM message_retry
    WHERE status = 'scheduled' AND consumer_name = ${consumer}
      AND event_id > ${after ?? '00000000-0000-0000-0000-000000000000'}::uuid
    ORDER BY event_id
    LIMIT ${limit}`;
}
