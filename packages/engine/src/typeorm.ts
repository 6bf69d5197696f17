// @postbox/engine/typeorm: events written through a TypeORM EntityManager bound to a transaction (PostgreSQL).
export { typeormExecutor, type TypeormManagerLike } from './adapters/sql/typeorm.ts';
export type { SqlExecutor, SqlParam } from './ports/sql-executor.ts';
