import { NotInTransactionError } from '../../errors.ts';
import type { SqlExecutor, SqlParam } from '../../ports/sql-executor.ts';
import { boundTransaction } from '../../db/bound-transaction.ts';
import { onTransaction } from '../../db/postgres-js.ts';

/** What Postbox needs of a TypeORM EntityManager: no import of typeorm itself. */
export interface TypeormManagerLike {
  readonly queryRunner?: {
    readonly isTransactionActive: boolean;
    readonly isReleased: boolean;
    query(text: string, params: unknown[], structured: true): Promise<{ records?: unknown[] }>;
  };
}

/**
 * A TypeORM EntityManager bound to a transaction (the manager of `dataSource.transaction(async (manager) => …)`,
 * or `queryRunner.manager` after `startTransaction()`) as an executor. `dataSource.manager` has no query runner
 * of its own and is refused. The query runner is the transaction: several managers may share one.
 */
export function typeormExecutor<M extends TypeormManagerLike>(manager: M): SqlExecutor<M> {
  // typeormFor(tx, dataSource) in a consumer handler: already in Postbox's transaction.
  const bound = boundTransaction(manager);
  if (bound) return onTransaction('typeorm', manager, bound);
  const runner = manager?.queryRunner;
  if (!runner || runner.isReleased || !runner.isTransactionActive)
    throw new NotInTransactionError(
      'typeorm',
      'pass the manager of dataSource.transaction(async (manager) => …), not dataSource.manager',
    );
  return {
    client: 'typeorm',
    handle: manager,
    transaction: runner,
    // The structured form: rows for every statement (the plain form returns [rows, count] for UPDATE … RETURNING).
    query: async <Row>(text: string, params: readonly SqlParam[]) =>
      ((await runner.query(text, [...params], true)).records ?? []) as Row[],
  };
}
