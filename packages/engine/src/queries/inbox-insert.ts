import type { Queryable } from '../db/connect.ts';

export interface InboxRow {
  event_id: string;
  aggregate_id: string;
  aggregate_version: number;
}

/**
 * Records events as seen by a consumer, in its transaction; returns the ids that were new. An id already
 * present (committed, or being inserted by a concurrent owner: the unique index makes us wait for it) is a
 * duplicate. Parameters: consumer name, rows. Rows returned: the inserted event ids. Locks: the new index entries.
 */
export async function insertInbox(sql: Queryable, consumer: string, rows: InboxRow[]): Promise<Set<string>> {
  if (rows.length === 0) return new Set();
  const inserted = await sql<{ event_id: string }[]>`
    INSERT INTO message_inbox (consumer_name, event_id, aggregate_id, aggregate_version)
    SELECT ${consumer}, e, a, v
    FROM unnest(${rows.map((r) => r.event_id)}::uuid[], ${rows.map((r) => r.aggregate_id)}::text[],
                ${rows.map((r) => r.aggregate_version)}::bigint[]) AS u(e, a, v)
    ON CONFLICT (consumer_name, event_id) DO NOTHING
    RETURNING event_id`;
  return new Set(inserted.map((r) => r.event_id));
}
