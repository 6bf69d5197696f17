import { Kysely, PostgresDialect } from 'kysely';
import type { Tx } from '../../db/connect.ts';
import { bindTransaction } from '../../db/bound-transaction.ts';
import { pgClient } from './pg-client.ts';

/**
 * A Kysely instance bound to a consumer handler's transaction (the `tx` it receives): its queries commit or roll
 * back with the inbox row. Make it per call, from that call's `tx`. `db.transaction()` inside is refused (the
 * transaction is Postbox's); streaming (cursors) is not offered.
 */
export function kyselyFor<DB>(tx: Tx): Kysely<DB> {
  const client = pgClient(tx);
  const db = new Kysely<DB>({
    // `options` would serve only to cancel a query from a second connection, which a handler cannot open here.
    dialect: new PostgresDialect({ pool: { connect: async () => client as never, end: async () => {}, options: {} } }),
  });
  return bindTransaction(db, tx);
}
