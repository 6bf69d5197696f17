import type postgres from 'postgres';
import { NotInTransactionError } from '../errors.ts';
import type { SqlExecutor, SqlParam } from '../ports/sql-executor.ts';

/**
 * A postgres.js transaction (the `tx` of `sql.begin`, or a savepoint of one) as an executor. The pool and a
 * reserved connection have no `savepoint`: they are refused, since a write there would commit on its own.
 * Statements are prepared (postgres.js caches them by text), as its tagged templates are.
 */
export function postgresJsExecutor(tx: postgres.TransactionSql): SqlExecutor<postgres.TransactionSql> {
  if (typeof (tx as { savepoint?: unknown } | null)?.savepoint !== 'function')
    throw new NotInTransactionError('postgres.js', 'pass the tx of sql.begin(async (tx) => …), not the pool');
  return onTransaction('postgres.js', tx, tx);
}

/**
 * The executor of a postgres.js transaction under another client's name and handle: what an adapter returns for a
 * handle made on a consumer handler's transaction (bound-transaction.ts).
 */
export function onTransaction<H>(client: string, handle: H, tx: postgres.TransactionSql): SqlExecutor<H> {
  return {
    client,
    handle,
    transaction: tx,
    query: <Row>(text: string, params: readonly SqlParam[]) =>
      tx.unsafe(text, params as never[], { prepare: true }) as unknown as Promise<Row[]>,
  };
}
