import type { Queryable } from '../db/connect.ts';

export interface InboxRow {
  event_id: string;
  aggregate_id: string;
  aggregate_version: number;
  /** envelope/fingerprint.ts of the record as received. */
  fingerprint: Buffer;
}

/**
 * What one delivery is to the inbox: taken in now ('new'), the same content as the delivery taken in before
 * ('duplicate'), or other content under that id ('conflict').
 */
export type InboxVerdict = 'new' | 'duplicate' | 'conflict';

/**
 * Records events as seen by a consumer, in its transaction, and judges every delivery (rows may repeat an id:
 * a task can hold two deliveries of one event). The first delivery of an id not yet in the inbox is taken in
 * with its fingerprint; every other delivery is compared with the fingerprint stored for its id — committed
 * before (a concurrent owner's insert makes us wait for it) or taken in just now — equal, or none stored: a
 * duplicate, counted on the row; different: a conflict, not counted. (Comparing with the first delivery in the
 * task instead would judge a true duplicate a conflict when a reused id comes first.)
 * Parameters: consumer name, rows. Returns: one verdict per row, in order. Locks: the new index entries; the
 * rows of ids already present (their duplicate count).
 */
export async function insertInbox(sql: Queryable, consumer: string, rows: InboxRow[]): Promise<InboxVerdict[]> {
  if (rows.length === 0) return [];
  // ON CONFLICT may touch a row once per statement: one row per event id, the first.
  const first = new Map<string, InboxRow>();
  for (const r of rows) if (!first.has(r.event_id)) first.set(r.event_id, r);
  const firsts = [...first.values()];
  const taken = await sql<{ event_id: string }[]>`
    INSERT INTO message_inbox (consumer_name, event_id, aggregate_id, aggregate_version, fingerprint)
    SELECT ${consumer}, e, a, v, decode(f, 'hex')
    FROM unnest(${firsts.map((r) => r.event_id)}::uuid[], ${firsts.map((r) => r.aggregate_id)}::text[],
                ${firsts.map((r) => r.aggregate_version)}::bigint[], ${firsts.map((r) => r.fingerprint.toString('hex'))}::text[]) AS u(e, a, v, f)
    ON CONFLICT (consumer_name, event_id) DO NOTHING
    RETURNING event_id`;
  const inserted = new Set(taken.map((r) => r.event_id));
  // The fingerprint each id is judged against (null: none stored, every copy is a duplicate).
  const reference = new Map<string, string | null>(
    firsts.filter((r) => inserted.has(r.event_id)).map((r) => [r.event_id, r.fingerprint.toString('hex')]),
  );
  const present = firsts.filter((r) => !inserted.has(r.event_id)).map((r) => r.event_id);
  if (present.length > 0) {
    const stored = await sql<{ event_id: string; fingerprint: string | null }[]>`
      SELECT event_id, encode(fingerprint, 'hex') AS fingerprint FROM message_inbox
      WHERE consumer_name = ${consumer} AND event_id = ANY(${present}::uuid[])`;
    for (const r of stored) reference.set(r.event_id, r.fingerprint);
  }
  const verdicts: InboxVerdict[] = [];
  const duplicates = new Map<string, number>();
  const takenNow = new Set<string>();
  for (const r of rows) {
    if (inserted.has(r.event_id) && !takenNow.has(r.event_id)) {
      takenNow.add(r.event_id);
      verdicts.push('new');
      continue;
    }
    const ref = reference.get(r.event_id);
    // Neither taken in nor there: a concurrent owner took it back out (forgetInbox) between the statements.
    if (ref === undefined)
      throw new Error(`inbox row of event ${r.event_id} vanished while it was judged; the task is retried`);
    if (ref === null || ref === r.fingerprint.toString('hex')) {
      verdicts.push('duplicate');
      duplicates.set(r.event_id, (duplicates.get(r.event_id) ?? 0) + 1);
    } else {
      verdicts.push('conflict');
    }
  }
  if (duplicates.size > 0) {
    // `= ANY` as well as the join: the index scan reads these rows only, whatever the statistics (consumer-version.ts).
    const ids = [...duplicates.keys()];
    await sql`
      UPDATE message_inbox AS i SET duplicate_deliveries = i.duplicate_deliveries + u.n
      FROM unnest(${ids}::uuid[], ${[...duplicates.values()]}::int[]) AS u(e, n)
      WHERE i.consumer_name = ${consumer} AND i.event_id = ANY(${ids}::uuid[]) AND i.event_id = u.e`;
  }
  return verdicts;
}

/**
 * Takes an event back out of the inbox: a parked event that then failed in its drain was taken in but never
 * applied, and its retry or replay must find it new. Parameters: consumer, event id.
 */
export async function forgetInbox(sql: Queryable, consumer: string, eventId: string): Promise<void> {
  await sql`DELETE FROM message_inbox WHERE consumer_name = ${consumer} AND event_id = ${eventId}`;
}
