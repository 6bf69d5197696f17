// @postbox/engine/pg: events written in a node-postgres transaction (a PoolClient inside BEGIN).
export { pgExecutor, type PgClientLike } from './adapters/sql/pg.ts';
export type { SqlExecutor, SqlParam } from './ports/sql-executor.ts';
