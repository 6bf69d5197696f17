import type { Queryable } from '../db/connect.ts';

/**
 * Payload retention of the failure store: drops the raw payload (and headers, which may carry data too; sealed or not) of
 * failures last seen before the cutoff, keeping the row — who failed, why, when — for the record. A purged
 * failure can no longer be replayed. Parameters: cutoff, batch size, and `closedOnly` (retention's run: failures
 * replayed, skipped or expired — an open one keeps its payload until an operator decides). Returns: rows purged.
 * Locks: those rows.
 */
export async function purgeFailurePayloads(
  sql: Queryable,
  olderThan: Date,
  batch = 1000,
  closedOnly = false,
): Promise<number> {
  const rows = await sql`
    UPDATE message_failure SET payload = NULL, headers = NULL, envelope = NULL, sealed = NULL, key_id = NULL, payload_purged_at = now()
    WHERE failure_id IN (
      SELECT failure_id FROM message_failure
      WHERE payload_purged_at IS NULL AND last_failed_at < ${olderThan} AND (NOT ${closedOnly} OR status <> 'open')
      ORDER BY failure_id LIMIT ${batch}
      FOR UPDATE SKIP LOCKED)`;
  return rows.count;
}
