// @postbox/engine/kysely (needs kysely). Events written in a Kysely transaction: kyselyExecutor. A Kysely
// instance bound to a consumer handler's transaction: kyselyFor.
export { kyselyExecutor, type KyselyTransactionLike } from './adapters/sql/kysely.ts';
export { kyselyFor } from './adapters/sql/kysely-handle.ts';
export type { SqlExecutor, SqlParam } from './ports/sql-executor.ts';
