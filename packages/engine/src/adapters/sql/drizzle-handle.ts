import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import type { Tx } from '../../db/connect.ts';
import { bindTransaction } from '../../db/bound-transaction.ts';
import { pgClient } from './pg-client.ts';

/**
 * A Drizzle database (node-postgres flavour: `pg` must be installed) bound to a consumer handler's transaction (the
 * `tx` it receives): its queries commit or roll back with the inbox row, with pg's own type parsing. Make it per
 * call, from that call's `tx`. `db.transaction()` inside is refused (the transaction is Postbox's).
 */
export function drizzleFor<TSchema extends Record<string, unknown> = Record<string, never>>(
  tx: Tx,
  config: { schema?: TSchema } = {},
): NodePgDatabase<TSchema> {
  return bindTransaction(drizzle({ client: pgClient(tx) as never, ...config }) as NodePgDatabase<TSchema>, tx);
}
