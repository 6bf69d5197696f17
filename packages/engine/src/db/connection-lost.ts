/** Node and postgres.js error codes for a connection that failed or went away. */
export const NETWORK_ERROR_CODES: ReadonlySet<string> = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'EAI_AGAIN',
  'CONNECTION_CLOSED',
  'CONNECTION_DESTROYED',
  'CONNECTION_ENDED',
  'CONNECT_TIMEOUT',
]);

interface CodedError {
  code?: unknown;
  name?: string;
  cause?: unknown;
}

/**
 * Whether an error says the database is out of reach, not that one statement failed: a network error, a
 * connection closed or never made, or postgres.js's QUERY_TIMEOUT that the server did not answer (its cause is not
 * the server's 57014 — the cancel went unanswered, or no connection could be had). Work that meets it should end
 * rather than go on item by item: every next statement waits out its own deadline the same way. Causes are
 * followed (an error wrapping a lost connection is one too).
 */
export function isConnectionLost(error: unknown, depth = 0): boolean {
  if (!error || typeof error !== 'object' || depth > 5) return false;
  const e = error as CodedError;
  const code = typeof e.code === 'string' ? e.code : undefined;
  if (code === 'CANCEL_UNANSWERED') return true;
  if (code === 'QUERY_TIMEOUT') return (e.cause as CodedError | undefined)?.name !== 'PostgresError';
  if (code && NETWORK_ERROR_CODES.has(code)) return true;
  return isConnectionLost(e.cause, depth + 1);
}
