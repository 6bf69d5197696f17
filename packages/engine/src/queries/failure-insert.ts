import type { PayloadKeyRing } from '../crypto/payload-keys.ts';
import { sealFailure } from '../crypto/row-seal.ts';
import type { Queryable } from '../db/connect.ts';

export interface FailureRow {
  event_id: string | null;
  event_type: string | null;
  aggregate_id: string | null;
  aggregate_version: number | null;
  topic: string;
  partition: number;
  offset: string;
  /** The value bytes exactly as received (may be neither UTF-8 nor JSON). */
  payload: Buffer | null;
  headers: Record<string, string>;
  envelope: unknown;
  error_code: string;
  error_detail: string;
  /** Attempts made before it failed for good. @defaultValue 1 */
  attempts?: number;
  /** @defaultValue 'open' */
  status?: 'open' | 'expired';
  /** When the first attempt failed (a retried event's ledger knows). @defaultValue now */
  first_failed_at?: Date;
}

/**
 * Stores a permanent failure in the failure store. The same event failing again (redelivery) updates its
 * open row: attempts + the new attempts, last_failed_at, the latest error. With a key ring the payload, headers
 * and envelope are stored sealed (crypto/row-seal.ts), none of them in clear. Parameters: consumer, row, ring.
 * Locks: the row.
 */
export async function insertFailure(
  sql: Queryable,
  consumer: string,
  f: FailureRow,
  keys: PayloadKeyRing | null = null,
): Promise<void> {
  const sealed = keys
    ? sealFailure(
        keys,
        {
          consumer_name: consumer,
          event_id: f.event_id,
          topic: f.topic,
          broker_partition: f.partition,
          broker_offset: f.offset,
        },
        { payload: f.payload, headers: f.headers, envelope: f.envelope ?? null },
      )
    : null;
  const clear = sealed === null;
  await sql`
    INSERT INTO message_failure (consumer_name, event_id, event_type, aggregate_id, aggregate_version, topic,
                                 broker_partition, broker_offset, payload, headers, envelope, key_id, sealed,
                                 error_code, error_detail, attempts, status, first_failed_at, last_failed_at)
    VALUES (${consumer}, ${f.event_id}, ${f.event_type}, ${f.aggregate_id}, ${f.aggregate_version}, ${f.topic},
            ${f.partition}, ${f.offset}, ${clear ? f.payload : null}, ${clear ? sql.json(f.headers as never) : null},
            ${clear && f.envelope !== undefined ? sql.json(f.envelope as never) : null}, ${sealed?.keyId ?? null},
            ${sealed?.bytes ?? null}, ${f.error_code}, ${f.error_detail},
            ${f.attempts ?? 1}, ${f.status ?? 'open'}, coalesce(${f.first_failed_at ?? null}::timestamptz, now()), now())
    ON CONFLICT (consumer_name, event_id) WHERE status = 'open' AND event_id IS NOT NULL
    DO UPDATE SET attempts = message_failure.attempts + EXCLUDED.attempts, last_failed_at = now(),
                  error_code = EXCLUDED.error_code, error_detail = EXCLUDED.error_detail`;
}
