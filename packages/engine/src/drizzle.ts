// @postbox/engine/drizzle (needs drizzle-orm; drizzleFor also pg). Events written in a Drizzle transaction:
// drizzleExecutor. A Drizzle database bound to a consumer handler's transaction: drizzleFor.
export { drizzleExecutor, type DrizzleTransactionLike } from './adapters/sql/drizzle.ts';
export { drizzleFor } from './adapters/sql/drizzle-handle.ts';
export type { SqlExecutor, SqlParam } from './ports/sql-executor.ts';
