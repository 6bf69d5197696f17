import type { Sql } from '@postbox/engine';
import { PARTITIONED_TABLES, premakePartitions } from '@postbox/engine/retention';

/**
 * Replaces a fresh database's partitions (its day partitions and the legacy one, rows and all) with partitions of
 * `periodSeconds` from now on, `ahead` of them: so that a test sees boundaries pass, and its processes make new
 * partitions, within seconds.
 */
export async function shortPartitions(sql: Sql, periodSeconds: number, ahead = 10): Promise<void> {
  for (const table of PARTITIONED_TABLES) {
    const ranges = await sql<{ partition: string }[]>`
      SELECT partition::text FROM postbox_partitions(${table}::regclass) WHERE NOT is_default`;
    for (const r of ranges) await sql`DROP TABLE ${sql(r.partition)}`;
    await premakePartitions(sql, table, periodSeconds, ahead);
  }
}
