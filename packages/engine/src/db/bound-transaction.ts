import type { Tx } from './connect.ts';

/**
 * Which handles were made on which consumer handler's transaction. A WeakMap rather than a property on the
 * handle: Prisma's transaction client is a proxy that refuses new properties. Registered on globalThis under a
 * registered symbol, so that copies of this module (sources and a build in one process) share it.
 */
const BOUND: WeakMap<object, Tx> = ((globalThis as Record<symbol, unknown>)[
  Symbol.for('postbox.bound-transactions')
] ??= new WeakMap<object, Tx>()) as WeakMap<object, Tx>;

/**
 * Marks a client handle made on a postgres.js transaction of Postbox's (pgClient, kyselyFor, drizzleFor,
 * typeormFor, a PrismaBinding's client), so that an event written through it (`enqueue(pgExecutor(client), …)`,
 * or the handle itself) joins that transaction as postgres.js's `tx` would: same statements, and the relays
 * nudged after its commit.
 */
export function bindTransaction<H extends object>(handle: H, tx: Tx): H {
  BOUND.set(handle, tx);
  return handle;
}

/** The postgres.js transaction a handle was made on, if it was. */
export function boundTransaction(value: unknown): Tx | undefined {
  return value !== null && (typeof value === 'object' || typeof value === 'function')
    ? BOUND.get(value as object)
    : undefined;
}
