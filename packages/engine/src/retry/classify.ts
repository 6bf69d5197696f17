import { NETWORK_ERROR_CODES } from '../db/connection-lost.ts';
import { PostboxError, type ErrorKind } from '../errors.ts';

/**
 * One classifier for every failure Postbox meets (docs/design.md §7). Each class has one policy:
 * - transient → the durable retry schedule (backoff + budget);
 * - permanent → the failure store, no retry;
 * - unknown   → query the final state first (did the commit happen?), then treat as one of the above.
 * Serialization failures and deadlocks are also `immediate`: worth a few quick retries in process, since the
 * conflicting transaction is usually gone a moment later.
 * Broker errors never reach here raw: each adapter (adapters/<broker>/) maps its client's errors into a
 * PostboxError with kind and code before they leave it, so this module knows no broker.
 */
export interface Classification {
  kind: ErrorKind;
  code: string;
  /** Retry at once, in process, a small fixed number of times (40001, 40P01 only). */
  immediate: boolean;
}

export const IMMEDIATE_RETRIES = 3;

// SQLSTATE classes and codes (https://www.postgresql.org/docs/current/errcodes-appendix.html).
const TRANSIENT_SQLSTATE_CLASSES = new Set(['08', '53', '57', '58']); // connection, resources, operator intervention, system
const TRANSIENT_SQLSTATES = new Set(['40001', '40P01', '55P03', '55006']); // serialization, deadlock, lock not available, object in use
const IMMEDIATE_SQLSTATES = new Set(['40001', '40P01']);
const PERMANENT_SQLSTATE_CLASSES = new Set(['22', '23', '42', '2B', '2F', '44', '0A', '28', '3D', '3F']);

interface CodedError {
  code?: unknown;
  name?: string;
  cause?: unknown;
  /** TypeORM's QueryFailedError keeps the driver's error here (it copies its code, but not its name). */
  driverError?: unknown;
}

export function classify(error: unknown): Classification {
  if (error instanceof PostboxError) return { kind: error.kind, code: error.code, immediate: false };
  const e = (error ?? {}) as CodedError;
  const code = typeof e.code === 'string' ? e.code : undefined;
  if (code && /^[0-9A-Z]{5}$/.test(code) && e.name === 'PostgresError') return classifySqlState(code);
  if (code && NETWORK_ERROR_CODES.has(code))
    return { kind: 'transient', code: `network_${code.toLowerCase()}`, immediate: false };
  // postgres.js 4: COMMIT answered with ROLLBACK — nothing was committed, so trying again is safe.
  if (code === 'TRANSACTION_ROLLED_BACK')
    return { kind: 'transient', code: 'pg_transaction_rolled_back', immediate: false };
  // postgres.js 4: a query on a transaction that already ended — a bug in the caller, not a passing condition.
  if (code === 'UNSAFE_TRANSACTION') return { kind: 'permanent', code: 'pg_unsafe_transaction', immediate: false };
  for (const inner of [e.cause, e.driverError]) {
    if (!inner || inner === error) continue;
    const classified = classify(inner);
    if (classified.code !== 'error') return classified;
  }
  // A handler's ordinary error: assume the world may change (a dependency comes back); the budget bounds it.
  return { kind: 'transient', code: 'error', immediate: false };
}

export function classifySqlState(sqlstate: string): Classification {
  const code = `pg_${sqlstate.toLowerCase()}`;
  if (TRANSIENT_SQLSTATES.has(sqlstate))
    return { kind: 'transient', code, immediate: IMMEDIATE_SQLSTATES.has(sqlstate) };
  const cls = sqlstate.slice(0, 2);
  if (TRANSIENT_SQLSTATE_CLASSES.has(cls)) return { kind: 'transient', code, immediate: false };
  if (PERMANENT_SQLSTATE_CLASSES.has(cls)) return { kind: 'permanent', code, immediate: false };
  return { kind: 'transient', code, immediate: false };
}

/**
 * A failure after the transaction's body ran (at COMMIT) over a broken connection: the database may have
 * committed. The caller must look (e.g. for its inbox row) before it decides.
 */
export function commitOutcomeUnknown(error: unknown): boolean {
  const c = classify(error);
  return c.code.startsWith('network_') || c.code.startsWith('pg_08') || c.code === 'pg_57p01';
}
