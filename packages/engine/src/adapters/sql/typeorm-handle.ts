import type { Tx } from '../../db/connect.ts';
import { ConfigError } from '../../errors.ts';
import { bindTransaction } from '../../db/bound-transaction.ts';
import { pgClient, type PgQueryConfig } from './pg-client.ts';

/** What typeormFor needs of a TypeORM DataSource (PostgreSQL): no import of typeorm itself. */
export interface TypeormDataSourceLike<Manager = unknown> {
  readonly isInitialized: boolean;
  readonly options: {
    readonly type: string;
    readonly synchronize?: boolean;
    readonly dropSchema?: boolean;
    readonly migrationsRun?: boolean;
  };
  /** The postgres driver: its `postgres` is the pg module it loaded, whose type parsers TypeORM's mapping expects. */
  readonly driver?: object;
  createQueryRunner(mode?: 'master' | 'slave'): { readonly manager: Manager };
  initialize(): Promise<unknown>;
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
 * the given DataSource (initialized: its metadata is what the manager maps with; the handle does not use its
 * pool). Values are sent as pg sends them and rows parsed by the pg type parsers TypeORM loaded, so the mapping
 * sees what it would see on its own connection. Its writes commit or roll back with the inbox row;
 * `manager.transaction(…)` inside is a savepoint (keep `handlerConcurrency` at 1 then: savepoints of handlers
 * running together on one connection would interleave). Make it per call, from that call's `tx`.
 */
export function typeormFor<Manager>(tx: Tx, dataSource: TypeormDataSourceLike<Manager>): Manager {
  requirePostgres(dataSource);
  if (!dataSource.isInitialized)
    throw new ConfigError('typeormFor needs an initialized DataSource (await dataSource.initialize() once)');
  const runner = dataSource.createQueryRunner('master');
  const state = runner as unknown as RunnerState;
  state.databaseConnection = connection(tx, pgTypesOf(dataSource));
  state.isTransactionActive = true;
  state.transactionDepth = 1;
  return bindTransaction(runner.manager as Manager & object, tx);
}

/**
 * The DataSource a module declared with `db: 'typeorm'` exports, initialized on first use in each worker thread
 * (again on the next call if that failed: the database may be down at start). It must not change the schema:
 * every worker would run `synchronize`, `dropSchema` or the migrations at once.
 */
export function initializedForHandlers<Manager>(
  dataSource: TypeormDataSourceLike<Manager>,
  url: string,
): () => Promise<TypeormDataSourceLike<Manager>> {
  requirePostgres(dataSource);
  const changes = (['synchronize', 'dropSchema', 'migrationsRun'] as const).filter((o) => dataSource.options[o]);
  if (changes.length > 0)
    throw new ConfigError(
      `handler module ${url}: the exported DataSource sets ${changes.join(', ')}; Postbox initializes it in every worker thread, where schema changes do not belong (run them once, with your migrations)`,
    );
  let ready: Promise<TypeormDataSourceLike<Manager>> | undefined;
  return () => {
    if (dataSource.isInitialized) return Promise.resolve(dataSource);
    ready ??= dataSource.initialize().then(
      () => dataSource,
      (cause) => {
        ready = undefined;
        throw cause;
      },
    );
    return ready;
  };
}

function pgTypesOf(dataSource: TypeormDataSourceLike<unknown>): PgQueryConfig['types'] | undefined {
  return (dataSource.driver as { postgres?: { types?: PgQueryConfig['types'] } } | undefined)?.postgres?.types;
}

function requirePostgres(dataSource: TypeormDataSourceLike<unknown>): void {
  if (dataSource?.options?.type !== 'postgres')
    throw new ConfigError(
      `a TypeORM handle needs a DataSource of type 'postgres', got ${JSON.stringify(dataSource?.options?.type)}`,
    );
}

/** pgClient with pg's type parsers on every query, and what TypeORM also calls on a client it holds. */
function connection(tx: Tx, types: PgQueryConfig['types'] | undefined): unknown {
  const client = pgClient(tx);
  return {
    query: (text: string, values?: readonly unknown[]) => client.query(types ? { text, values, types } : text, values),
    release() {},
    on() {},
    removeListener() {},
  };
}
