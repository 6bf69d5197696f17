import { boundTransaction } from './bound-transaction.ts';
import { postgresJsExecutor } from './postgres-js.ts';
import { NotInTransactionError } from '../errors.ts';
import { isSqlExecutor, type SqlExecutor } from '../ports/sql-executor.ts';
import type { Queryable, Tx } from './connect.ts';

/**
 * The executor for a transaction the caller hands Postbox: an executor made by one of the client adapters
 * (@postbox/engine/pg, /drizzle, /kysely, /prisma, /typeorm) as it is, a postgres.js transaction wrapped.
 * Anything else (a postgres.js pool above all) is refused before a statement is sent.
 */
export function sqlExecutor<H>(tx: SqlExecutor<H>): SqlExecutor<H>;
export function sqlExecutor(tx: Queryable): SqlExecutor<Tx>;
export function sqlExecutor(tx: Queryable | SqlExecutor): SqlExecutor;
export function sqlExecutor(tx: Queryable | SqlExecutor): SqlExecutor {
  if (isSqlExecutor(tx)) return tx;
  // A client handle made on a consumer handler's transaction (pgClient, kyselyFor, drizzleFor) writes in it.
  const bound = boundTransaction(tx);
  if (bound) return postgresJsExecutor(bound);
  // postgres.js (a function): its executor takes a transaction and refuses the pool or a reserved connection.
  if (typeof tx === 'function') return postgresJsExecutor(tx as Tx);
  throw new NotInTransactionError(
    'the handle given',
    'pass the transaction your business change is written in (postgres.js: the tx of sql.begin; other clients: through their adapter, e.g. pgExecutor(client) from @postbox/engine/pg)',
  );
}
