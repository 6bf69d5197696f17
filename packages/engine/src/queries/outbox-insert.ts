import type { SqlExecutor, SqlParam } from '../ports/sql-executor.ts';

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

/**
 * Each column with the cast its parameter carries: every client sends these parameters the same way (text,
 * int4, bytes), and PostgreSQL makes the column's type of them. jsonb travels as text (`::text::jsonb`): a client
 * that knows the parameter is jsonb would encode the JSON text a second time.
 */
const COLUMNS: ReadonlyArray<readonly [column: keyof OutboxInsertRow, cast: string]> = [
  ['event_id', 'uuid'],
  ['event_type', 'text'],
  ['schema_version', 'int4'],
  ['aggregate_id', 'text'],
  ['aggregate_version', 'text::int8'],
  ['topic', 'text'],
  ['payload', 'bytea'],
  ['producer', 'text'],
  ['occurred_at', 'text::timestamptz'],
  ['traceparent', 'text'],
  ['tracestate', 'text'],
  ['deadline', 'text::timestamptz'],
  ['extensions', 'text::jsonb'],
  ['replaces_event_id', 'uuid'],
];
const COLUMN_LIST = COLUMNS.map(([column]) => column).join(', ');
/** Rows per statement: 14 parameters a row, far below PostgreSQL's 65,535 parameters a statement. */
const ROWS_PER_STATEMENT = 1000;

/**
 * Inserts outbox rows as `pending`, in multi-row statements of the caller's transaction.
 * Parameters: the rows. Returns: the lanes the rows fell in (the relay wakes only those). Locks: the new rows; the UNIQUE (aggregate_id, aggregate_version)
 * and event_id keys make a second writer of the same version wait for the first and then fail with 23505.
 */
export async function insertOutboxRows(tx: SqlExecutor, rows: OutboxInsertRow[]): Promise<number[]> {
  const lanes = new Set<number>();
  for (let start = 0; start < rows.length; start += ROWS_PER_STATEMENT) {
    const chunk = rows.slice(start, start + ROWS_PER_STATEMENT);
    const inserted = await tx.query<{ lane: number }>(insertText(chunk.length), chunk.flatMap(rowParams));
    for (const r of inserted) lanes.add(Number(r.lane));
  }
  return [...lanes];
}

const texts = new Map<number, string>();

/** The statement for `count` rows; kept, so a prepared statement is reused for a repeated batch size. */
function insertText(count: number): string {
  let text = texts.get(count);
  if (text) return text;
  const tuples = Array.from(
    { length: count },
    (_, r) => `(${COLUMNS.map(([, cast], c) => `$${r * COLUMNS.length + c + 1}::${cast}`).join(', ')})`,
  );
  text = `INSERT INTO message_outbox (${COLUMN_LIST}) VALUES ${tuples.join(', ')} RETURNING lane`;
  if (texts.size < 64) texts.set(count, text);
  return text;
}

function rowParams(row: OutboxInsertRow): SqlParam[] {
  return [
    row.event_id,
    row.event_type,
    row.schema_version,
    row.aggregate_id,
    String(row.aggregate_version),
    row.topic,
    row.payload,
    row.producer,
    row.occurred_at,
    row.traceparent,
    row.tracestate,
    row.deadline,
    row.extensions === null ? null : JSON.stringify(row.extensions),
    row.replaces_event_id,
  ];
}
