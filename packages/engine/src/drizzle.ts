// @postbox/engine/drizzle (needs drizzle-orm): events written in a Drizzle transaction, drizzleExecutor. A Drizzle
// database bound to a consumer handler's transaction is in @postbox/engine/drizzle/node-postgres (it needs pg).
export { drizzleExecutor, type DrizzleTransactionLike } from './adapters/sql/drizzle.ts';
export type { SqlExecutor, SqlParam } from './ports/sql-executor.ts';
