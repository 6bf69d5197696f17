import type { SqlExecutor } from '../ports/sql-executor.ts';

/**
 * Claims (scope, key) for this transaction. Returns true when this call inserted the row.
 * Locks: the new row; a concurrent claim of the same key waits for this transaction to end.
 */
export async function claimIdempotencyKey(
  tx: SqlExecutor,
  scope: string,
  key: string,
  requestHash: string,
): Promise<boolean> {
  const rows = await tx.query(
    `INSERT INTO command_idempotency (scope, key, request_hash)
     VALUES ($1::text, $2::text, $3::text)
     ON CONFLICT (scope, key) DO NOTHING
     RETURNING 1 AS claimed`,
    [scope, key, requestHash],
  );
  return rows.length === 1;
}

/** Reads a stored key. Returns: the request hash and the result, or undefined. Locks: none. */
export async function readIdempotencyKey(
  tx: SqlExecutor,
  scope: string,
  key: string,
): Promise<{ request_hash: string; result: unknown } | undefined> {
  // jsonb as text, parsed here: each client would otherwise parse (or not) in its own way.
  const [row] = await tx.query<{ request_hash: string; result: string | null }>(
    'SELECT request_hash, result::text AS result FROM command_idempotency WHERE scope = $1::text AND key = $2::text',
    [scope, key],
  );
  return row && { request_hash: row.request_hash, result: row.result === null ? null : JSON.parse(row.result) };
}

/** Stores the command's result with its claimed key. Locks: the key's row (already held). */
export async function storeIdempotencyResult(
  tx: SqlExecutor,
  scope: string,
  key: string,
  result: unknown,
): Promise<void> {
  await tx.query('UPDATE command_idempotency SET result = $1::text::jsonb WHERE scope = $2::text AND key = $3::text', [
    JSON.stringify(result ?? null),
    scope,
    key,
  ]);
}
