// @postbox/engine/drizzle: events written in a Drizzle transaction (PostgreSQL; needs drizzle-orm installed).
export { drizzleExecutor, type DrizzleTransactionLike } from './adapters/sql/drizzle.ts';
export type { SqlExecutor, SqlParam } from './ports/sql-executor.ts';
