import type { Queryable } from '../db/connect.ts';
import type { PartitionedTable } from './partitions.ts';

/**
 * The time of the oldest event id in a table, read from its primary key: the outbox's (event_id) directly; the
 * inbox's (consumer_name, event_id) per consumer, the consumers found by a skip scan of the same index. Returns
 * null for an empty table, or one the role may not read. Locks: none.
 */
export async function oldestEventTime(sql: Queryable, table: PartitionedTable): Promise<Date | null> {
  try {
    return await oldestIn(sql, table);
  } catch (cause) {
    // A role that may not read the table (postbox_relay and the inbox, say) still reports the rest of its sizes.
    if ((cause as { code?: string }).code === INSUFFICIENT_PRIVILEGE) return null;
    throw cause;
  }
}

const INSUFFICIENT_PRIVILEGE = '42501';

async function oldestIn(sql: Queryable, table: PartitionedTable): Promise<Date | null> {
  if (table === 'message_outbox') {
    const [row] = await sql<{ at: Date | null }[]>`
      SELECT postbox_uuid_time((SELECT event_id FROM message_outbox ORDER BY event_id LIMIT 1)) AS at`;
    return row!.at;
  }
  const [row] = await sql<{ at: Date | null }[]>`
    WITH RECURSIVE consumers AS (
      (SELECT consumer_name FROM message_inbox ORDER BY consumer_name LIMIT 1)
      UNION ALL
      SELECT (SELECT i.consumer_name FROM message_inbox i WHERE i.consumer_name > c.consumer_name
              ORDER BY i.consumer_name LIMIT 1)
      FROM consumers c WHERE c.consumer_name IS NOT NULL
    )
    SELECT min(postbox_uuid_time((SELECT i.event_id FROM message_inbox i WHERE i.consumer_name = c.consumer_name
                                  ORDER BY i.event_id LIMIT 1))) AS at
    FROM consumers c WHERE c.consumer_name IS NOT NULL`;
  return row!.at;
}
