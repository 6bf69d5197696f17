import { sql, type SQL } from 'drizzle-orm';
import { NotInTransactionError } from '../../errors.ts';
import type { SqlExecutor, SqlParam } from '../../ports/sql-executor.ts';
import { boundTransaction } from '../../db/bound-transaction.ts';
import { onTransaction } from '../../db/postgres-js.ts';

const ENTITY_KIND = Symbol.for('drizzle:entityKind');

/** What Postbox needs of a Drizzle transaction on PostgreSQL (node-postgres or postgres.js driver). */
export interface DrizzleTransactionLike {
  execute(query: SQL): Promise<unknown>;
}

/**
 * A Drizzle transaction (the `tx` of `db.transaction(async (tx) => …)`) as an executor. Drizzle marks its classes
 * with an entity kind; a PgTransaction (NodePgTransaction, PostgresJsTransaction) is one, the database is not.
 */
export function drizzleExecutor<T extends DrizzleTransactionLike>(tx: T): SqlExecutor<T> {
  // drizzleFor(tx) (or db: 'drizzle') in a consumer handler: already in Postbox's transaction.
  const bound = boundTransaction(tx);
  if (bound) return onTransaction('drizzle', tx, bound);
  if (!isPgTransaction(tx))
    throw new NotInTransactionError('drizzle', 'pass the tx of db.transaction(async (tx) => …), not the database');
  return {
    client: 'drizzle',
    handle: tx,
    transaction: tx,
    async query<Row>(text: string, params: readonly SqlParam[]): Promise<Row[]> {
      const result = await tx.execute(toDrizzleSql(text, params));
      // node-postgres returns a result with rows; postgres.js returns the rows.
      return (Array.isArray(result) ? result : (result as { rows: unknown[] }).rows) as Row[];
    },
  };
}

function isPgTransaction(value: unknown): boolean {
  for (let c = (value as object | null)?.constructor; c; c = Object.getPrototypeOf(c) as typeof c) {
    if (Object.hasOwn(c, ENTITY_KIND) && (c as unknown as Record<symbol, unknown>)[ENTITY_KIND] === 'PgTransaction')
      return true;
  }
  return false;
}

/** `$1…$n` text as Drizzle SQL: the text between placeholders, each parameter bound as one value (`sql.param`). */
function toDrizzleSql(text: string, params: readonly SqlParam[]): SQL {
  const chunks: SQL[] = [];
  let last = 0;
  for (const match of text.matchAll(/\$(\d+)/g)) {
    chunks.push(sql.raw(text.slice(last, match.index)));
    chunks.push(sql`${sql.param(params[Number(match[1]) - 1])}`);
    last = match.index + match[0].length;
  }
  chunks.push(sql.raw(text.slice(last)));
  return sql.join(chunks);
}
