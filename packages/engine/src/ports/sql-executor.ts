/**
 * The one door through which Postbox writes into a transaction the caller owns, whatever client opened it:
 * postgres.js, node-postgres, Drizzle, Kysely, Prisma or TypeORM (an adapter per client, @postbox/engine/<client>).
 * Statements are plain text with `$1…$n` placeholders, every placeholder cast in the text, and parameters limited
 * to what every client sends the same way (strings, int4 numbers, booleans, null, bytes, arrays of strings or
 * numbers): bigints, uuids, timestamps and jsonb travel as text and are cast by PostgreSQL, so no client's type
 * inference decides what is stored.
 */
export type SqlParam = string | number | boolean | null | Uint8Array | ReadonlyArray<string | number | null>;

export interface SqlExecutor<Handle = unknown> {
  /** Which client this is, for errors: 'postgres.js', 'pg', 'drizzle', 'kysely', 'prisma', 'typeorm'. */
  readonly client: string;
  /** The caller's own handle, given back to `idempotent`'s function so it goes on writing with its client. */
  readonly handle: Handle;
  /** The transaction's identity: what marks it as having written outbox rows (one per transaction). */
  readonly transaction: object;
  /** Runs one statement in the transaction; resolves with its rows (empty when it returns none). */
  query<Row = Record<string, unknown>>(text: string, params: readonly SqlParam[]): Promise<Row[]>;
}

export function isSqlExecutor(value: unknown): value is SqlExecutor {
  const v = value as Partial<SqlExecutor> | null;
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof v.query === 'function' &&
    typeof v.client === 'string' &&
    // postgres.js's transaction is a function (a tagged template): any non-null reference identifies one.
    (typeof v.transaction === 'object' || typeof v.transaction === 'function') &&
    v.transaction !== null
  );
}
