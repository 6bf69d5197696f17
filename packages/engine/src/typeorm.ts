// @postbox/engine/typeorm: events written through a TypeORM EntityManager bound to a transaction (PostgreSQL), and
// typeormFor, an EntityManager bound to a consumer handler's transaction.
export { typeormExecutor, type TypeormManagerLike } from './adapters/sql/typeorm.ts';
export { typeormFor, type TypeormDataSourceLike } from './adapters/sql/typeorm-handle.ts';
export type { SqlExecutor, SqlParam } from './ports/sql-executor.ts';
