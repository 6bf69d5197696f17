import { AsyncLocalStorage } from 'node:async_hooks';
import { PrismaPg } from '@prisma/adapter-pg';
import type { Tx } from '../../db/connect.ts';
import { ConfigError } from '../../errors.ts';
import { bindTransaction } from '../../db/bound-transaction.ts';
import { pgClient } from './pg-client.ts';

/** What a PrismaBinding needs of the user's PrismaClient: its interactive transaction. */
export interface PrismaClientLike<TxClient> {
  $transaction<T>(fn: (tx: TxClient) => Promise<T>, options?: { maxWait?: number; timeout?: number }): Promise<T>;
}

/** The TxClient a PrismaClient's interactive transaction hands out. */
type TxClientOf<C> = C extends PrismaClientLike<infer T> ? T : never;

/** Makes the user's PrismaClient with the adapter Postbox gives it: `(adapter) => new PrismaClient({ adapter })`. */
export type PrismaClientFactory<C> = (adapter: PrismaPg) => C | Promise<C>;

/** @prisma/adapter-pg's own options (`schema`, `userDefinedTypeParser`, …), given to the adapter Postbox makes. */
export type PrismaPgOptions = ConstructorParameters<typeof PrismaPg>[1];

/**
 * Prisma clients bound to consumer handlers' transactions. One PrismaClient is made per binding (per worker
 * thread), on first use.
 */
export interface PrismaBinding<TxClient> {
  /**
   * Calls `fn` with a Prisma transaction client whose statements run in `tx` (a handler's transaction, which
   * commits with the inbox row), as a nested transaction: a throw from `fn` undoes what it wrote (a savepoint).
   */
  run<T>(tx: Tx, fn: (prisma: TxClient) => Promise<T>): Promise<T>;
  /**
   * The same without the savepoint, for a whole handler call (how a consumer declared with `db: 'prisma'` calls
   * its handler): a throw fails the call, and the consumer rolls the whole transaction back.
   */
  asHandler<T>(tx: Tx, fn: (prisma: TxClient) => Promise<T>): Promise<T>;
}

/** What startTransaction of @prisma/adapter-pg (7.x) does with its pool: takes a client, listens for errors. */
interface PgAdapterInternals {
  client: unknown;
  startTransaction: unknown;
}

/** One run: its transaction, its savepoint (none for asHandler), and how far Prisma's transaction has got. */
interface Run {
  tx: Tx;
  savepoint: string | null;
  /** Prisma took its connection: a second one in the same run would be a transaction Postbox cannot give. */
  connected: boolean;
  /** The callback has returned or thrown: Prisma's COMMIT or ROLLBACK comes next. */
  settled: boolean;
  /** The last error a statement of the run met, given to Prisma's wrapped error as its cause. */
  failure?: unknown;
}

/** Prisma's transaction timeout (5 s by default) would end a slow handler on its own; the consumer's is enough. */
const NO_TIMEOUT = { maxWait: 60_000, timeout: 2_147_483_647 };

/**
 * Prisma runs an interactive transaction as BEGIN, the callback's statements, COMMIT (or ROLLBACK), all through
 * one client of its adapter's pool. Here that client is Postbox's transaction: Prisma's BEGIN becomes a SAVEPOINT
 * and its COMMIT or ROLLBACK the savepoint's RELEASE or ROLLBACK TO (`run`), or none of them is sent (`asHandler`);
 * everything between goes to the handler's `tx` as pgClient sends it.
 */
export function prismaBinding<C extends PrismaClientLike<unknown>>(
  factory: PrismaClientFactory<C>,
  options?: PrismaPgOptions,
): PrismaBinding<TxClientOf<C>> {
  const current = new AsyncLocalStorage<Run>();
  let client: Promise<C> | undefined;
  let savepoints = 0;
  const make = async (): Promise<C> => {
    const adapter = new PrismaPg({}, options);
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
  const start = async <T>(tx: Tx, savepoint: string | null, fn: (prisma: TxClientOf<C>) => Promise<T>) => {
    // A factory that failed (a missing generated client, say) is tried again on the next call.
    client ??= make().catch((cause) => {
      client = undefined;
      throw cause;
    });
    const prisma = await client;
    const run: Run = { tx, savepoint, connected: false, settled: false };
    const inside = async (ptx: unknown) => {
      try {
        return await fn(bindTransaction(ptx as TxClientOf<C> & object, tx));
      } finally {
        run.settled = true;
      }
    };
    try {
      return await current.run(run, () => prisma.$transaction(inside, NO_TIMEOUT));
    } catch (error) {
      throw withCause(error, run.failure);
    }
  };
  return {
    run: (tx, fn) => start(tx, `postbox_prisma_${++savepoints}`, fn),
    asHandler: (tx, fn) => start(tx, null, fn),
  };
}

/**
 * Prisma wraps a failed statement's error in its own, keeping the SQLSTATE as text: the original (a PostgresError,
 * or Postbox's refusal) becomes the cause, so the consumer classifies the failure as it would the original.
 */
function withCause(error: unknown, failure: unknown): unknown {
  if (failure !== undefined && error instanceof Error && error.cause === undefined && error !== failure)
    Object.defineProperty(error, 'cause', { value: failure, configurable: true, writable: true });
  return error;
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
      // One transaction per run: Prisma's own transactions of the PrismaClient (a nested write, $transaction([…]))
      // would otherwise land in the handler's transaction and end it.
      if (run.connected)
        throw new ConfigError(
          'inside PrismaBinding.run, write with the transaction client it hands you, not the PrismaClient',
        );
      run.connected = true;
      return transactionConnection(run);
    },
    query: outside,
  };
}

const PRISMA_CONTROL = /^(BEGIN|COMMIT|ROLLBACK)$/;
const ISOLATION = /^SET TRANSACTION ISOLATION LEVEL/i;

/**
 * pgClient on the handler's tx, with Prisma's own BEGIN first and its COMMIT or ROLLBACK after the callback made
 * the run's savepoint statements (or nothing); the callback's own statements meet pgClient's refusal of
 * transaction control.
 */
function transactionConnection(run: Run) {
  const client = pgClient(run.tx);
  let began = false;
  const send = async (text: string, config?: unknown) => {
    try {
      return await client.query((config ?? text) as never);
    } catch (error) {
      run.failure = error;
      throw error;
    }
  };
  const done = (command: string) => ({ rows: [], rowCount: 0, command, fields: [] });
  return {
    async query(config: { text: string }) {
      const control = PRISMA_CONTROL.exec(config.text)?.[1];
      if (control === 'BEGIN' && !began) {
        began = true;
        if (run.savepoint) await send(`SAVEPOINT ${run.savepoint}`);
        return done('BEGIN');
      }
      if (ISOLATION.test(config.text) && !run.settled)
        throw new ConfigError(
          'the handler’s transaction is Postbox’s and has begun: a Prisma isolation level (transactionOptions.isolationLevel of the PrismaClient) cannot apply to it; leave it out of the client a PrismaBinding makes',
        );
      if ((control === 'COMMIT' || control === 'ROLLBACK') && run.settled) {
        if (run.savepoint && control === 'COMMIT') await send(`RELEASE SAVEPOINT ${run.savepoint}`);
        if (run.savepoint && control === 'ROLLBACK') {
          await send(`ROLLBACK TO SAVEPOINT ${run.savepoint}`);
          await send(`RELEASE SAVEPOINT ${run.savepoint}`);
        }
        return done(control);
      }
      return send(config.text, config);
    },
    release() {},
    on() {},
    removeListener() {},
  };
}
