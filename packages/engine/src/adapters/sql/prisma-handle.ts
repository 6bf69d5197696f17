import { AsyncLocalStorage } from 'node:async_hooks';
import { PrismaPg } from '@prisma/adapter-pg';
import type { Tx } from '../../db/connect.ts';
import { ConfigError } from '../../errors.ts';
import { bindTransaction } from './bound-transaction.ts';
import { pgClient } from './pg-client.ts';

/** What a PrismaBinding needs of the user's PrismaClient: its interactive transaction. */
export interface PrismaClientLike<TxClient> {
  $transaction<T>(fn: (tx: TxClient) => Promise<T>, options?: { maxWait?: number; timeout?: number }): Promise<T>;
}

/** The TxClient a PrismaClient's interactive transaction hands out. */
type TxClientOf<C> = C extends PrismaClientLike<infer T> ? T : never;

/** Makes the user's PrismaClient with the adapter Postbox gives it: `(adapter) => new PrismaClient({ adapter })`. */
export type PrismaClientFactory<C> = (adapter: PrismaPg) => C | Promise<C>;

/**
 * Prisma clients bound to consumer handlers' transactions. `run(tx, fn)` calls `fn` with a Prisma transaction
 * client whose statements run in `tx` (the handler's transaction, which commits with the inbox row). One
 * PrismaClient is made per binding (per worker thread), on first use.
 */
export interface PrismaBinding<TxClient> {
  run<T>(tx: Tx, fn: (prisma: TxClient) => Promise<T>): Promise<T>;
}

/** What startTransaction of @prisma/adapter-pg (7.x) does with its pool: takes a client, listens for errors. */
interface PgAdapterInternals {
  client: unknown;
  startTransaction: unknown;
}

/** The run in progress: its transaction, and whether its callback has returned (Prisma's COMMIT comes next). */
interface Run {
  tx: Tx;
  settled: boolean;
}

/**
 * Prisma runs an interactive transaction as BEGIN, the callback's statements, COMMIT (or ROLLBACK), all through
 * one client of its adapter's pool. Here that client is Postbox's transaction: Prisma's own BEGIN and its closing
 * COMMIT or ROLLBACK are not sent (the transaction is Postbox's, a callback's throw still rolls it back, since the
 * error reaches the consumer); everything between goes to the handler's `tx` as pgClient sends it.
 */
export function prismaBinding<C extends PrismaClientLike<unknown>>(
  factory: PrismaClientFactory<C>,
): PrismaBinding<TxClientOf<C>> {
  const current = new AsyncLocalStorage<Run>();
  let client: Promise<C> | undefined;
  const make = async (): Promise<C> => {
    const adapter = new PrismaPg({});
    const connect = adapter.connect.bind(adapter);
    // The adapter is Prisma's own (its argument and column type mapping); only its pool is replaced.
    adapter.connect = async () => {
      const connected = (await connect()) as unknown as PgAdapterInternals;
      if (!('client' in connected) || typeof connected.startTransaction !== 'function')
        throw new ConfigError('prismaBinding: this @prisma/adapter-pg is not the 7.x it was built for');
      // (The pg pool it made is left as made: it never connects, and the adapter ends it on dispose.)
      connected.client = routedPool(current);
      return connected as never;
    };
    return factory(adapter);
  };
  return {
    async run(tx, fn) {
      client ??= make();
      const prisma = await client;
      // Prisma's transaction timeout (5 s by default) would end a slow handler on its own; the consumer's is enough.
      const state: Run = { tx, settled: false };
      const inside = async (ptx: unknown) => {
        try {
          return await fn(bindTransaction(ptx as TxClientOf<C> & object, tx));
        } finally {
          state.settled = true;
        }
      };
      return current.run(state, () => prisma.$transaction(inside, { maxWait: 60_000, timeout: 2_147_483_647 }));
    },
  };
}

/** The pool Prisma's adapter takes its transaction's client from: the handler's transaction running now. */
function routedPool(current: AsyncLocalStorage<Run>) {
  const outside = async () => {
    throw new ConfigError('a PrismaBinding client runs statements only inside run(tx, fn), in the handler’s tx');
  };
  return {
    async connect() {
      const run = current.getStore();
      if (!run) return outside();
      return transactionConnection(run);
    },
    query: outside,
  };
}

const PRISMA_CONTROL = /^(BEGIN|COMMIT|ROLLBACK)$/;

/**
 * pgClient on the handler's tx, with Prisma's own BEGIN first and its COMMIT or ROLLBACK after the callback not
 * sent; the callback's own statements meet pgClient's refusal of transaction control.
 */
function transactionConnection(run: Run) {
  const client = pgClient(run.tx);
  let began = false;
  return {
    async query(config: { text: string }) {
      const control = PRISMA_CONTROL.exec(config.text)?.[1];
      if (control === 'BEGIN' && !began) {
        began = true;
        return { rows: [], rowCount: 0, command: 'BEGIN', fields: [] };
      }
      if ((control === 'COMMIT' || control === 'ROLLBACK') && run.settled)
        return { rows: [], rowCount: 0, command: control, fields: [] };
      return client.query(config as never);
    },
    release() {},
    on() {},
    removeListener() {},
  };
}
