import type { Tx } from '../db/connect.ts';
import { ConfigError } from '../errors.ts';
import type { TypeormDataSourceLike } from '../adapters/sql/typeorm-handle.ts';
import type { BatchHandler, Handler, HandlerModule, HandlerWithBatch } from '../records/handler.ts';
import type { HandlerClient } from './definition.ts';

/** Loads a handler module (once per worker thread) and checks its shape; see loadHandlerModule. */
export async function loadHandler(url: string): Promise<Handler> {
  return (await loadHandlerModule(url)).handler;
}

/**
 * Loads a handler module: a default export (per event), a `handleBatch` export (per task), or both. A module
 * with only `handleBatch` handles a single event as a batch of one.
 */
export async function loadHandlerModule(url: string, db: HandlerClient = 'postgres.js'): Promise<HandlerModule> {
  const { module, loaded } = await loadModule(url);
  if (db === 'postgres.js') return loaded;
  // The handler writes with another client: its `tx` argument becomes that client's handle on the same transaction.
  const withHandle = await handleBinder(db, module, url);
  return {
    handler: (event, tx, context) => withHandle(tx, (handle) => loaded.handler(event, handle, context)),
    batch: loaded.batch && ((items, tx) => withHandle(tx, (handle) => loaded.batch!(items, handle))),
  };
}

/** Runs `fn` with a client's handle on the transaction `tx` (typed as Tx: the handler module declares the client). */
type WithHandle = (tx: Tx, fn: (handle: Tx) => Promise<void>) => Promise<void>;

/**
 * How a client's handle is made for a call; the client's adapter is loaded only when declared. Prisma and TypeORM
 * need the module's own client setup: its `prisma` binding (prismaBinding) or its TypeORM `dataSource`.
 */
async function handleBinder(
  db: Exclude<HandlerClient, 'postgres.js'>,
  module: Record<string, unknown>,
  url: string,
): Promise<WithHandle> {
  const per =
    (bind: (tx: Tx) => unknown): WithHandle =>
    (tx, fn) =>
      fn(bind(tx) as Tx);
  switch (db) {
    case 'pg':
      return per((await import('../adapters/sql/pg-client.ts')).pgClient);
    case 'drizzle':
      return per((await import('../adapters/sql/drizzle-handle.ts')).drizzleFor);
    case 'kysely':
      return per((await import('../adapters/sql/kysely-handle.ts')).kyselyFor);
    case 'prisma': {
      const binding = module.prisma as { asHandler?: unknown } | undefined;
      if (typeof binding?.asHandler !== 'function')
        throw new ConfigError(
          `handler module ${url} declares db: 'prisma' and must export its binding: export const prisma = prismaBinding((adapter) => new PrismaClient({ adapter })), from @postbox/engine/prisma/adapter-pg`,
        );
      return (tx, fn) => (binding as { asHandler: WithHandle }).asHandler(tx, fn);
    }
    case 'typeorm': {
      const dataSource = module.dataSource as TypeormDataSourceLike | undefined;
      if (typeof dataSource?.createQueryRunner !== 'function')
        throw new ConfigError(
          `handler module ${url} declares db: 'typeorm' and must export its DataSource: export const dataSource = new DataSource({ type: 'postgres', … })`,
        );
      const { typeormFor, initializedForHandlers } = await import('../adapters/sql/typeorm-handle.ts');
      const ready = initializedForHandlers(dataSource, url);
      return async (tx, fn) => fn(typeormFor(tx, await ready()) as Tx);
    }
  }
}

async function loadModule(url: string): Promise<{ module: Record<string, unknown>; loaded: HandlerModule }> {
  let module: { default?: unknown; handleBatch?: unknown } & Record<string, unknown>;
  try {
    module = (await import(url)) as typeof module;
  } catch (cause) {
    throw new ConfigError(`handler module ${url} could not be loaded: ${(cause as Error).message}`, { cause });
  }
  const one = typeof module.default === 'function' ? (module.default as Handler) : null;
  if (module.handleBatch !== undefined && typeof module.handleBatch !== 'function')
    throw new ConfigError(`handler module ${url}: handleBatch must be a function: async (batch, tx) => void`);
  const batch = (module.handleBatch as BatchHandler | undefined) ?? (one as HandlerWithBatch | null)?.batch ?? null;
  if (!one && !batch) {
    throw new ConfigError(
      `handler module ${url} must have a default export: async (event, tx, context) => void, or a handleBatch export: async (batch, tx) => void`,
    );
  }
  return { module, loaded: { handler: one ?? ((event, tx, context) => batch!([{ event, context }], tx)), batch } };
}
