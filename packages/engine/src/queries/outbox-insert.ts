import type { Queryable } from '../db/connect.ts';

export interface OutboxInsertRow {
  event_id: string;
  event_type: string;
  schema_version: number;
  aggregate_id: string;
  aggregate_version: number;
  topic: string;
  payload: Buffer;
  producer: string;
  occurred_at: string;
  traceparent: string | null;
  tracestate: string | null;
  deadline: string | null;
  /** CloudEvents extension attributes (jsonb); null when the event has none. */
  extensions: Record<string, string> | null;
  replaces_event_id: string | null;
}

const COLUMNS = [
  'event_id',
  'event_type',
  'schema_version',
  'aggregate_id',
  'aggregate_version',
  'topic',
  'payload',
  'producer',
  'occurred_at',
  'traceparent',
  'tracestate',
  'deadline',
  'extensions',
  'replaces_event_id',
] as const;

/**
 * Inserts outbox rows as `pending`, in one multi-row statement.
 * Parameters: the rows. Returns: the lanes the rows fell in (the relay wakes only those). Locks: the new rows; the UNIQUE (aggregate_id, aggregate_version)
 * and event_id keys make a second writer of the same version wait for the first and then fail with 23505.
 */
export async function insertOutboxRows(tx: Queryable, rows: OutboxInsertRow[]): Promise<number[]> {
  if (rows.length === 0) return [];
  // jsonb typed by the client, as every jsonb parameter of Postbox is (queries/audit.ts), not left to inference.
  const values = rows.map((r) => (r.extensions === null ? r : { ...r, extensions: tx.json(r.extensions) }));
  const inserted = await tx<{ lane: number }[]>`
    INSERT INTO message_outbox ${tx(values as never, COLUMNS as never)} RETURNING lane`;
  return [...new Set(inserted.map((r) => r.lane))];
}
