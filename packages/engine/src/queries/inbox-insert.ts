import type { Queryable } from '../db/connect.ts';

export interface InboxRow {
  event_id: string;
  aggregate_id: string;
  aggregate_version: number;
  /** envelope/fingerprint.ts of the record as received. */
  fingerprint: Buffer;
}

export interface InboxResult {
  /** Ids that were new: the event is taken in now. */
  inserted: Set<string>;
  /** Ids already taken in with another fingerprint: the same event_id with different content. */
  conflicts: Set<string>;
}

/**
 * Records events as seen by a consumer, in its transaction. An id already present (committed, or being inserted
 * by a concurrent owner: the unique index makes us wait for it) with the same fingerprint — or none stored — is
 * a duplicate, counted on its row (only duplicates write there); with another fingerprint it is a conflict, not
 * counted as a duplicate. Rows may repeat an id (one batch holding two deliveries): the first is the one taken
 * in, with its fingerprint, and later byte-identical copies count as duplicates on its row (a different one is
 * the caller's conflict). Parameters: consumer name, rows. Rows returned: each id, whether it was inserted, and
 * the fingerprint stored for it. Locks: the new index entries; a duplicate's row.
 */
export async function insertInbox(sql: Queryable, consumer: string, rows: InboxRow[]): Promise<InboxResult> {
  if (rows.length === 0) return { inserted: new Set(), conflicts: new Set() };
  // ON CONFLICT DO UPDATE may touch a row once per statement: one row per event id, the first.
  const unique = new Map<string, InboxRow & { copies: number }>();
  for (const r of rows) {
    const first = unique.get(r.event_id);
    if (!first) unique.set(r.event_id, { ...r, copies: 0 });
    else if (first.fingerprint.equals(r.fingerprint)) first.copies++;
  }
  const list = [...unique.values()];
  const sent = new Map(list.map((r) => [r.event_id, r.fingerprint.toString('hex')]));
  const result = await sql<{ event_id: string; inserted: boolean; fingerprint: string | null }[]>`
    INSERT INTO message_inbox (consumer_name, event_id, aggregate_id, aggregate_version, fingerprint, duplicate_deliveries)
    SELECT ${consumer}, e, a, v, decode(f, 'hex'), c
    FROM unnest(${list.map((r) => r.event_id)}::uuid[], ${list.map((r) => r.aggregate_id)}::text[],
                ${list.map((r) => r.aggregate_version)}::bigint[], ${[...sent.values()]}::text[],
                ${list.map((r) => r.copies)}::int[]) AS u(e, a, v, f, c)
    ON CONFLICT (consumer_name, event_id) DO UPDATE SET duplicate_deliveries = message_inbox.duplicate_deliveries
      + CASE WHEN message_inbox.fingerprint IS NULL OR message_inbox.fingerprint = excluded.fingerprint THEN 1 + excluded.duplicate_deliveries ELSE 0 END
    RETURNING event_id, (xmax = 0) AS inserted, encode(fingerprint, 'hex') AS fingerprint`;
  const inserted = new Set<string>();
  const conflicts = new Set<string>();
  for (const r of result) {
    if (r.inserted) inserted.add(r.event_id);
    else if (r.fingerprint !== null && r.fingerprint !== sent.get(r.event_id)) conflicts.add(r.event_id);
  }
  return { inserted, conflicts };
}

/**
 * Takes an event back out of the inbox: a parked event that then failed in its drain was taken in but never
 * applied, and its retry or replay must find it new. Parameters: consumer, event id.
 */
export async function forgetInbox(sql: Queryable, consumer: string, eventId: string): Promise<void> {
  await sql`DELETE FROM message_inbox WHERE consumer_name = ${consumer} AND event_id = ${eventId}`;
}
