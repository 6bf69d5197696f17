import type { SqlExecutor } from '../ports/sql-executor.ts';
import type { Queryable } from '../db/connect.ts';
import type { HistoryEntry } from '../records/saga-state.ts';

/**
 * Appends a saga's transition lines. Parameters: saga id, the version they lead to, the lines, the actor.
 * Locks: none beyond the new rows (the caller holds the saga row).
 */
export async function insertSagaHistory(
  tx: SqlExecutor,
  sagaId: string,
  version: number,
  entries: HistoryEntry[],
  actor = 'postbox',
): Promise<void> {
  if (entries.length === 0) return;
  await tx.query(
    `INSERT INTO saga_history (saga_id, version, from_status, to_status, step, direction, cause, actor)
     SELECT $1::uuid, $2::text::int8, f, t, s, d, c, $3::text
     FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) AS u(f, t, s, d, c)`,
    [
      sagaId,
      String(version),
      actor,
      entries.map((e) => e.from),
      entries.map((e) => e.to),
      entries.map((e) => e.step),
      entries.map((e) => e.direction),
      entries.map((e) => e.cause),
    ],
  );
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
