import type { Queryable } from '../db/connect.ts';

/**
 * Deletes a batch of ended sagas (completed, compensated, closed manually) whose last change is older than the
 * cutoff, with their history, in one statement (the history first: it references the saga; both deletes see one
 * snapshot and the foreign key is checked at the statement's end). Frozen sagas (needs_attention) are never
 * deleted: they wait for an operator, however old.
 * Parameters: cutoff, batch size. Returns: sagas deleted. Locks: those rows (SKIP LOCKED: a saga an operator is
 * acting on is left for the next batch).
 */
export async function deleteEndedSagas(sql: Queryable, cutoff: Date, batch: number): Promise<number> {
  const rows = await sql`
    WITH ended AS (
      SELECT saga_id FROM saga_instance
      WHERE status IN ('completed', 'compensated', 'closed_manually') AND updated_at < ${cutoff}
      ORDER BY updated_at LIMIT ${batch}
      FOR UPDATE SKIP LOCKED
    ), history AS (
      DELETE FROM saga_history WHERE saga_id IN (SELECT saga_id FROM ended)
    )
    DELETE FROM saga_instance WHERE saga_id IN (SELECT saga_id FROM ended) RETURNING 1`;
  return rows.length;
}

/**
 * Deletes a batch of ignored replies recorded before the cutoff (kept for the operator as long as the sagas).
 * Parameters: cutoff, batch size. Returns: rows deleted. Locks: those rows.
 */
export async function deleteIgnoredReplies(sql: Queryable, cutoff: Date, batch: number): Promise<number> {
  const rows = await sql`
    DELETE FROM saga_reply_ignored WHERE id IN (
      SELECT id FROM saga_reply_ignored WHERE at < ${cutoff} ORDER BY at LIMIT ${batch})
    RETURNING 1`;
  return rows.length;
}
