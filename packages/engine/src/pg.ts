// @postbox/engine/pg: node-postgres. Events written in a pg transaction (a PoolClient inside BEGIN): pgExecutor.
// A pg-shaped client bound to a consumer handler's transaction, for repositories written for pg: pgClient.
export { pgExecutor, type PgClientLike } from './adapters/sql/pg.ts';
export {
  pgClient,
  type PgCompatibleClient,
  type PgQueryConfig,
  type PgQueryResult,
} from './adapters/sql/pg-client.ts';
export type { SqlExecutor, SqlParam } from './ports/sql-executor.ts';
