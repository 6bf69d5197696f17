import { NotInTransactionError } from '../../errors.ts';
import type { SqlExecutor, SqlParam } from '../../ports/sql-executor.ts';
import { boundTransaction } from '../../db/bound-transaction.ts';
import { onTransaction } from '../../db/postgres-js.ts';

/** What Postbox needs of a Prisma client: no import of @prisma/client itself. */
export interface PrismaTransactionLike {
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): Promise<T>;
}

/**
 * A Prisma interactive transaction (the `tx` of `prisma.$transaction(async (tx) => …)`) as an executor. The
 * transaction client Prisma hands out hides `$connect` (and `$disconnect`, `$on`); the PrismaClient itself has it.
 * The batch form `$transaction([…])` gives no handle to write with, so it cannot carry an event.
 */
export function prismaExecutor<T extends PrismaTransactionLike>(tx: T): SqlExecutor<T> {
  // The transaction client of a PrismaBinding in a consumer handler: already in Postbox's transaction.
  const bound = boundTransaction(tx);
  if (bound) return onTransaction('prisma', tx, bound);
  if (typeof tx?.$queryRawUnsafe !== 'function' || '$connect' in tx)
    throw new NotInTransactionError('prisma', 'pass the tx of prisma.$transaction(async (tx) => …), not the client');
  return {
    client: 'prisma',
    handle: tx,
    transaction: tx,
    query: <Row>(text: string, params: readonly SqlParam[]) =>
      tx.$queryRawUnsafe<Row[]>(text, ...params.map((p) => (p instanceof Uint8Array ? Buffer.from(p) : p))),
  };
}
