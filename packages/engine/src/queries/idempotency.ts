import type { Queryable } from '../db/connect.ts';

/**
 * Claims (scope, key) for this transaction. Returns true when this call inserted the row.
 * Locks: the new row; a concurrent claim of the same key waits for this transaction to end.
 */
export async function claimIdempotencyKey(
  tx: Queryable,
  scope: string,
  key: string,
  requestHash: string,
): Promise<boolean> {
  const rows = await tx`
    INSERT INTO command_idempotency (scope, key, request_hash)
    VALUES (${scope}, ${key}, ${requestHash})
    ON CONFLICT (scope, key) DO NOTHING
    RETURNING 1`;
  return rows.length === 1;
}

/** Reads a stored key. Returns: the request hash and the result, or undefined. Locks: none. */
export async function readIdempotencyKey(
  tx: Queryable,
  scope: string,
  key: string,
): Promise<{ request_hash: string; result: unknown } | undefined> {
  const [row] = await tx<{ request_hash: string; result: unknown }[]>`
    SELECT request_hash, result FROM command_idempotency WHERE scope = ${scope} AND key = ${key}`;
  return row;
}

/** Stores the command's result with its claimed key. Locks: the key's row (already held). */
export async function storeIdempotencyResult(
  tx: Queryable,
  scope: string,
  key: string,
  result: unknown,
): Promise<void> {
  await tx`
    UPDATE command_idempotency SET result = ${tx.json(result as never)}
    WHERE scope = ${scope} AND key = ${key}`;
}
