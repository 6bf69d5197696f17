import { NotInTransactionError } from '../../errors.ts';
import type { SqlExecutor, SqlParam } from '../../ports/sql-executor.ts';
import { boundTransaction } from '../../db/bound-transaction.ts';
import { onTransaction } from '../../db/postgres-js.ts';

/** What Postbox needs of a node-postgres client (`pg.PoolClient` or `pg.Client`): no import of pg itself. */
export interface PgClientLike {
  query(text: string, values: unknown[]): Promise<{ rows: unknown[] }>;
  /** pg ≥ 8.21: 'I' idle, 'T' in a transaction, 'E' in a failed one; null when unknown (pg-native). */
  getTransactionStatus?(): string | null;
}

/**
 * A node-postgres client inside `BEGIN` as an executor. A Pool is refused (each query would take any client and
 * commit on its own). pg ≥ 8.21 says where the client stands; older clients are asked once with a SAVEPOINT,
 * which PostgreSQL refuses outside a transaction block (25P01) and in a failed one (25P02).
 */
export function pgExecutor<C extends PgClientLike>(client: C): SqlExecutor<C> {
  // pgClient(tx) in a consumer handler: already in Postbox's transaction.
  const bound = boundTransaction(client);
  if (bound) return onTransaction('pg', client, bound);
  if (client === null || typeof client !== 'object' || 'totalCount' in client)
    throw new NotInTransactionError('pg', 'pass the client of pool.connect() after BEGIN, not the Pool');
  let probe: Promise<void> | undefined;
  const inTransaction = async (): Promise<void> => {
    const status = client.getTransactionStatus?.() ?? null;
    if (status === 'T') return;
    if (status === 'I') throw new NotInTransactionError('pg', 'the client is not inside BEGIN … COMMIT');
    if (status === 'E') throw new NotInTransactionError('pg', 'the client is in a failed transaction (ROLLBACK it)');
    probe ??= savepointProbe(client);
    await probe;
  };
  return {
    client: 'pg',
    handle: client,
    transaction: client,
    async query<Row>(text: string, params: readonly SqlParam[]): Promise<Row[]> {
      await inTransaction();
      try {
        return (await client.query(text, [...params])).rows as Row[];
      } catch (err) {
        // pg learns of a failed transaction only with the ReadyForQuery after the error: a write right after a
        // failed statement can pass the status check and meet PostgreSQL's refusal (25P02) instead.
        if ((err as { code?: string }).code === '25P02')
          throw new NotInTransactionError('pg', 'the client is in a failed transaction (ROLLBACK it)', { cause: err });
        throw err;
      }
    },
  };
}

async function savepointProbe(client: PgClientLike): Promise<void> {
  try {
    await client.query('SAVEPOINT postbox_in_transaction', []);
    await client.query('RELEASE SAVEPOINT postbox_in_transaction', []);
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === '25P01' || code === '25P02')
      throw new NotInTransactionError('pg', 'the client is not inside BEGIN … COMMIT', { cause: err });
    throw err;
  }
}
