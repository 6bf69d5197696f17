import { CompiledQuery, type QueryResult } from 'kysely';
import { NotInTransactionError } from '../../errors.ts';
import type { SqlExecutor, SqlParam } from '../../ports/sql-executor.ts';
import { boundTransaction } from '../../db/bound-transaction.ts';
import { onTransaction } from '../../db/postgres-js.ts';

/**
 * A Kysely transaction (the `trx` of `db.transaction().execute(…)`, or of `startTransaction()`) as an executor.
 * `isTransaction` is Kysely's own flag: false on the database object and on `db.connection()`.
 */
/** What Postbox needs of a Kysely transaction (`Transaction` or `ControlledTransaction`). */
export interface KyselyTransactionLike {
  readonly isTransaction: boolean;
  executeQuery<R>(query: CompiledQuery<R>): Promise<QueryResult<R>>;
}

export function kyselyExecutor<T extends KyselyTransactionLike>(trx: T): SqlExecutor<T> {
  // kyselyFor(tx) (or db: 'kysely') in a consumer handler: already in Postbox's transaction.
  const bound = boundTransaction(trx);
  if (bound) return onTransaction('kysely', trx, bound);
  if ((trx as { isTransaction?: unknown } | null)?.isTransaction !== true)
    throw new NotInTransactionError('kysely', 'pass the trx of db.transaction().execute(async (trx) => …)');
  return {
    client: 'kysely',
    handle: trx,
    transaction: trx,
    async query<Row>(text: string, params: readonly SqlParam[]): Promise<Row[]> {
      return (await trx.executeQuery(CompiledQuery.raw(text, [...params]))).rows as Row[];
    },
  };
}
