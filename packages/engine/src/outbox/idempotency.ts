import { createHash } from 'node:crypto';
import type { Tx } from '../db/connect.ts';
import { sqlExecutor } from '../db/sql-executor.ts';
import type { SqlExecutor } from '../ports/sql-executor.ts';
import { IdempotencyConflictError } from '../errors.ts';
import { claimIdempotencyKey, readIdempotencyKey, storeIdempotencyResult } from '../queries/idempotency.ts';

export interface IdempotentCommand {
  scope: string;
  key: string;
  /** The request as received; its canonical hash tells a true repeat from a different request. */
  request: unknown;
}

export interface IdempotentResult<T> {
  result: T;
  /** True when this call returned the stored result of an earlier one and did nothing else. */
  repeated: boolean;
}

/**
 * Runs `fn` once per (scope, key) inside the caller's transaction. A repeat with the same request returns the
 * stored result (and so the same event ids) without running `fn`; a different request under the same key is an
 * IdempotencyConflictError. A concurrent first attempt holds the key's row lock until it commits, so the repeat
 * waits for it and then sees its result. `fn`'s result must be JSON.
 */
export async function idempotent<T>(
  tx: Tx,
  command: IdempotentCommand,
  fn: (tx: Tx) => Promise<T>,
): Promise<IdempotentResult<T>>;
/** The same through a client's adapter: `fn` gets the client's own transaction handle back. */
export async function idempotent<T, H>(
  tx: SqlExecutor<H>,
  command: IdempotentCommand,
  fn: (tx: H) => Promise<T>,
): Promise<IdempotentResult<T>>;
export async function idempotent<T>(
  tx: Tx | SqlExecutor,
  command: IdempotentCommand,
  fn: (tx: never) => Promise<T>,
): Promise<IdempotentResult<T>> {
  const executor = sqlExecutor(tx);
  const hash = requestHash(command.request);
  const claimed = await claimIdempotencyKey(executor, command.scope, command.key, hash);
  if (!claimed) {
    const stored = await readIdempotencyKey(executor, command.scope, command.key);
    if (!stored || stored.request_hash !== hash) throw new IdempotencyConflictError(command.scope, command.key);
    return { result: stored.result as T, repeated: true };
  }
  const result = await fn(executor.handle as never);
  await storeIdempotencyResult(executor, command.scope, command.key, result);
  return { result, repeated: false };
}

/** SHA-256 of the request with object keys sorted, so key order does not make a repeat look different. */
export function requestHash(request: unknown): string {
  return createHash('sha256').update(canonicalJson(request)).digest('hex');
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}
