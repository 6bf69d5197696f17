import type { Tx } from '../../db/connect.ts';

/** Where a handle made on a consumer handler's transaction keeps it (a registered symbol: one across copies). */
const BOUND = Symbol.for('postbox.bound-transaction');

/**
 * Marks a client handle made on a postgres.js transaction of Postbox's (pgClient, kyselyFor, drizzleFor), so that
 * an event written through it (`enqueue(pgExecutor(client), …)`, or the handle itself) joins that transaction as
 * postgres.js's `tx` would: same statements, and the relays nudged after its commit.
 */
export function bindTransaction<H extends object>(handle: H, tx: Tx): H {
  Object.defineProperty(handle, BOUND, { value: tx, enumerable: false });
  return handle;
}

/** The postgres.js transaction a handle was made on, if it was. */
export function boundTransaction(value: unknown): Tx | undefined {
  return value !== null && (typeof value === 'object' || typeof value === 'function')
    ? ((value as Record<symbol, Tx | undefined>)[BOUND] ?? undefined)
    : undefined;
}
