import type { Tx } from '../../db/connect.ts';
import { ConfigError } from '../../errors.ts';
import { bindTransaction } from './bound-transaction.ts';
import { pgClient } from './pg-client.ts';

/** What typeormFor needs of a TypeORM DataSource (PostgreSQL): no import of typeorm itself. */
export interface TypeormDataSourceLike<Manager = unknown> {
  readonly isInitialized: boolean;
  readonly options: { readonly type: string };
  createQueryRunner(mode?: 'master' | 'slave'): { readonly manager: Manager };
}

/**
 * The query runner's state typeormFor sets (TypeORM's PostgresQueryRunner: public or protected fields, stable
 * since 0.3): a connection already held skips the pool, an active transaction at depth 1 makes `save` write
 * without a transaction of its own and a nested `manager.transaction(…)` a savepoint.
 */
interface RunnerState {
  databaseConnection: unknown;
  isTransactionActive: boolean;
  transactionDepth: number;
}

/**
 * A TypeORM EntityManager bound to a consumer handler's transaction (the `tx` it receives), with the entities of
 * the given DataSource (initialized: its metadata is what the manager maps with; its own pool is not used). Its
 * writes commit or roll back with the inbox row; `manager.transaction(…)` inside opens a savepoint. Make it per
 * call, from that call's `tx`.
 */
export function typeormFor<Manager>(tx: Tx, dataSource: TypeormDataSourceLike<Manager>): Manager {
  if (dataSource?.options?.type !== 'postgres')
    throw new ConfigError(
      `typeormFor needs a DataSource of type 'postgres', got ${JSON.stringify(dataSource?.options?.type)}`,
    );
  if (!dataSource.isInitialized)
    throw new ConfigError('typeormFor needs an initialized DataSource (await dataSource.initialize() once)');
  const runner = dataSource.createQueryRunner('master');
  const state = runner as unknown as RunnerState;
  state.databaseConnection = connection(tx);
  state.isTransactionActive = true;
  state.transactionDepth = 1;
  return bindTransaction(runner.manager as Manager & object, tx);
}

/** pgClient with what TypeORM also calls on a pool client it holds: error listeners. */
function connection(tx: Tx): unknown {
  return { ...pgClient(tx), on() {}, removeListener() {} };
}
