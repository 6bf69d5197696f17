import type { Sql, Tx } from '../db/connect.ts';
import { failpoint } from '../testing/failpoint.ts';
import { dirtyLanes, isDirty } from './dirty.ts';
import type { Waker } from './wake.ts';

/**
 * Runs `fn` in a transaction and, after a successful commit that wrote outbox rows, nudges the relays.
 * The nudge is sent strictly after commit, outside the transaction (see wake.ts for why).
 */
export async function transaction<T>(sql: Sql, waker: Waker, fn: (tx: Tx) => Promise<T>): Promise<T> {
  let wrote = false;
  let lanes: number[] = [];
  const result = await sql.begin(async (tx) => {
    const value = await fn(tx);
    wrote = isDirty(tx);
    lanes = dirtyLanes(tx);
    return value;
  });
  if (wrote) {
    failpoint('outbox.after-commit');
    waker.wake(lanes);
  }
  return result as T;
}
