import type { FailureContent, FailureIdentity, SealedColumns } from '../crypto/row-seal.ts';
import type { Queryable } from '../db/connect.ts';

/**
 * What key rotation reads and writes: rows of the failure store and the retry ledger that are not sealed with the
 * ring's primary key (sealed with an older one, or in clear), in primary-key order.
 */

/** A failure row's stored content and identity, for re-sealing. */
export interface FailureSealRow extends FailureIdentity, SealedColumns, FailureContent {
  failure_id: number;
}

/** A ledger row's stored record and identity, for re-sealing. */
export interface LedgerSealRow extends SealedColumns {
  consumer_name: string;
  event_id: string;
  record: unknown;
}

/** Failure rows with content (not purged) not sealed with `primary`. Locks: none. */
export async function countFailuresToSeal(sql: Queryable, primary: string): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM message_failure
    WHERE key_id IS DISTINCT FROM ${primary}
      AND (sealed IS NOT NULL OR payload IS NOT NULL OR headers IS NOT NULL OR envelope IS NOT NULL)`;
  return row!.n;
}

/** Ledger rows not sealed with `primary`. Locks: none. */
export async function countLedgerToSeal(sql: Queryable, primary: string): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM message_retry WHERE key_id IS DISTINCT FROM ${primary}`;
  return row!.n;
}

/** The next `limit` failure rows to re-seal after id `after`. Locks: those rows (FOR UPDATE). */
export async function lockFailuresToSeal(
  tx: Queryable,
  primary: string,
  after: number,
  limit: number,
): Promise<FailureSealRow[]> {
  return tx<FailureSealRow[]>`
    SELECT failure_id::int, consumer_name, event_id, topic, broker_partition, broker_offset::text,
           payload, headers, envelope, key_id, sealed
    FROM message_failure
    WHERE failure_id > ${after} AND key_id IS DISTINCT FROM ${primary}
      AND (sealed IS NOT NULL OR payload IS NOT NULL OR headers IS NOT NULL OR envelope IS NOT NULL)
    ORDER BY failure_id
    LIMIT ${limit}
    FOR UPDATE`;
}

/** Stores one failure row's content sealed. Locks: the row. */
export async function storeSealedFailure(tx: Queryable, id: number, keyId: string, sealed: Buffer): Promise<void> {
  await tx`
    UPDATE message_failure SET payload = NULL, headers = NULL, envelope = NULL, key_id = ${keyId}, sealed = ${sealed}
    WHERE failure_id = ${id}`;
}

/** The next `limit` ledger rows to re-seal after (consumer, event). Locks: those rows (FOR UPDATE). */
export async function lockLedgerToSeal(
  tx: Queryable,
  primary: string,
  after: { consumer: string; eventId: string } | null,
  limit: number,
): Promise<LedgerSealRow[]> {
  return tx<LedgerSealRow[]>`
    SELECT consumer_name, event_id, record, key_id, sealed
    FROM message_retry
    WHERE key_id IS DISTINCT FROM ${primary}
      AND (${after?.consumer ?? null}::text IS NULL
           OR (consumer_name, event_id) > (${after?.consumer ?? ''}, ${after?.eventId ?? '00000000-0000-0000-0000-000000000000'}::uuid))
    ORDER BY consumer_name, event_id
    LIMIT ${limit}
    FOR UPDATE`;
}

/** Stores one ledger row's record sealed. Locks: the row. */
export async function storeSealedRecord(
  tx: Queryable,
  consumer: string,
  eventId: string,
  keyId: string,
  sealed: Buffer,
): Promise<void> {
  await tx`
    UPDATE message_retry SET record = NULL, key_id = ${keyId}, sealed = ${sealed}
    WHERE consumer_name = ${consumer} AND event_id = ${eventId}`;
}

/** Rows per table by the key that seals them ('clear' in clear, 'purged' without content). Locks: none. */
export async function payloadKeyUsage(sql: Queryable): Promise<Array<{ table: string; key: string; rows: number }>> {
  return sql`
    SELECT 'message_failure' AS table,
           coalesce(key_id, CASE WHEN payload IS NULL AND headers IS NULL AND envelope IS NULL THEN 'purged' ELSE 'clear' END) AS key,
           count(*)::int AS rows
    FROM message_failure GROUP BY 2
    UNION ALL
    SELECT 'message_retry', coalesce(key_id, 'clear'), count(*)::int FROM message_retry GROUP BY 2
    ORDER BY 1, 2`;
}
