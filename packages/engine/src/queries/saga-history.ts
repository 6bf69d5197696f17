import type { Queryable } from '../db/connect.ts';
import type { HistoryEntry } from '../saga/state.ts';

/**
 * Appends a saga's transition lines. Parameters: saga id, the version they lead to, the lines, the actor.
 * Locks: none beyond the new rows (the caller holds the saga row).
 */
export async function insertSagaHistory(
  sql: Queryable,
  sagaId: string,
  version: number,
  entries: HistoryEntry[],
  actor = 'postbox',
): Promise<void> {
  if (entries.length === 0) return;
  await sql`
    INSERT INTO saga_history (saga_id, version, from_status, to_status, step, direction, cause, actor)
    SELECT ${sagaId}, ${version}, f, t, s, d, c, ${actor}
    FROM unnest(${entries.map((e) => e.from)}::text[], ${entries.map((e) => e.to)}::text[],
                ${entries.map((e) => e.step)}::text[], ${entries.map((e) => e.direction)}::text[],
                ${entries.map((e) => e.cause)}::text[]) AS u(f, t, s, d, c)`;
}

export interface SagaHistoryRow {
  version: number;
  from: string | null;
  to: string;
  step: string | null;
  direction: string | null;
  cause: string;
  actor: string;
  at: Date;
}

/** A saga's history, oldest first. Parameters: saga id. Returns: its lines. Locks: none. */
export async function sagaHistory(sql: Queryable, sagaId: string): Promise<SagaHistoryRow[]> {
  const rows = await sql<Array<Omit<SagaHistoryRow, 'version'> & { version: string }>>`
    SELECT version::text, from_status AS "from", to_status AS "to", step, direction, cause, actor, at
    FROM saga_history WHERE saga_id = ${sagaId} ORDER BY id`;
  return rows.map((r) => ({ ...r, version: Number(r.version) }));
}
