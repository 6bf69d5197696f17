import type { Queryable } from '@postbox/engine';
import type { SagaStatus } from '@postbox/engine/saga';

export type SagaCounts = Record<SagaStatus, number>;

/**
 * Sagas of one type by status, for the progress line. Parameters: the saga type. Returns: a count for every
 * status (0 when none). Locks: none.
 */
export async function sagaCounts(sql: Queryable, type: string): Promise<SagaCounts> {
  const rows = await sql<Array<{ status: SagaStatus; n: number }>>`
    SELECT status, count(*)::int AS n FROM saga_instance WHERE saga_type = ${type} GROUP BY status`;
  const counts: SagaCounts = {
    running: 0,
    resolving: 0,
    compensating: 0,
    completed: 0,
    compensated: 0,
    needs_attention: 0,
    closed_manually: 0,
  };
  for (const r of rows) counts[r.status] = r.n;
  return counts;
}
