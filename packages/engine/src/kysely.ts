// @postbox/engine/kysely: events written in a Kysely transaction (PostgreSQL; needs kysely installed).
export { kyselyExecutor, type KyselyTransactionLike } from './adapters/sql/kysely.ts';
export type { SqlExecutor, SqlParam } from './ports/sql-executor.ts';
