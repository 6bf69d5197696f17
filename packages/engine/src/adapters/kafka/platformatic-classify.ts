import { TimeoutError } from '@platformatic/kafka';
import { BrokerError, PostboxError, type ErrorKind } from '../../errors.ts';
import { PERMANENT_AFTER, PERMANENT_TYPES } from './classify.ts';

interface PlatformaticLikeError {
  message?: string;
  code?: string;
  /** A broker's protocol error: its id, e.g. MESSAGE_TOO_LARGE. */
  apiId?: string;
  errors?: unknown[];
  cause?: unknown;
}

/**
 * Maps a @platformatic/kafka error to Postbox's error tree, with the kafkajs adapter's codes and kinds
 * (classify.ts): a broker's protocol error is `kafka_<its id>`, permanent for the same ids (an unknown topic
 * transient for a few attempts, then permanent); an authentication failure permanent; a timeout `unknown` (a
 * request may have reached the broker and been appended; the publisher makes it transient where nothing was
 * sent yet); anything else transient. The client wraps what went wrong (a send's "Producing messages failed." holds each broker's errors,
 * each its cause), so the whole tree is searched.
 */
export function classifyPlatformaticError(error: unknown): PostboxError {
  if (error instanceof PostboxError) return error;
  const nested = flatten(error);
  const apiId = protocolErrorOf(nested);
  const authentication = nested.some((e) => e.code === 'PLT_KFK_AUTHENTICATION');
  const timeout = nested.some((e) => e instanceof TimeoutError);
  let kind: ErrorKind = 'transient';
  if ((apiId && PERMANENT_TYPES.has(apiId)) || authentication) kind = 'permanent';
  else if (timeout) kind = 'unknown';
  const code = apiId
    ? `kafka_${apiId.toLowerCase()}`
    : authentication
      ? 'kafka_sasl_authentication_failed'
      : timeout
        ? 'kafka_request_timeout'
        : `kafka_${(nested.at(-1)?.code ?? 'error').replace(/^PLT_KFK_/, '').toLowerCase()}`;
  const permanentAfter = apiId ? PERMANENT_AFTER.get(apiId) : undefined;
  const message = nested.map((e) => e.message).filter(Boolean);
  return new BrokerError(code, kind, `kafka (@platformatic/kafka): ${message.join(': ') || String(error)}`, {
    cause: error,
    ...(permanentAfter ? { permanentAfter } : {}),
  });
}

/**
 * The broker's error id that says most: a permanent one if any (a retried request keeps every attempt's error,
 * oldest first, so the first found may be an earlier transient one); else the first that is not a record's own
 * UNKNOWN_SERVER_ERROR (a Produce response lists its records' errors before the partition's). The client turns
 * an unknown topic in its metadata into a user error: that is UNKNOWN_TOPIC_OR_PARTITION, as kafkajs reports it.
 */
function protocolErrorOf(nested: PlatformaticLikeError[]): string | undefined {
  const ids = nested.flatMap((e) => (typeof e.apiId === 'string' ? [e.apiId] : []));
  if (nested.some((e) => e.code === 'PLT_KFK_USER' && e.message?.startsWith('Unknown topic')))
    ids.push('UNKNOWN_TOPIC_OR_PARTITION');
  return ids.find((id) => PERMANENT_TYPES.has(id)) ?? ids.find((id) => id !== 'UNKNOWN_SERVER_ERROR') ?? ids[0];
}

/** The error and everything it wraps (`errors`, `cause`), outermost first; at most 20. */
function flatten(error: unknown): PlatformaticLikeError[] {
  const out: PlatformaticLikeError[] = [];
  const queue: unknown[] = [error];
  while (queue.length > 0 && out.length < 20) {
    const e = queue.shift();
    if (!e || typeof e !== 'object') continue;
    const err = e as PlatformaticLikeError;
    out.push(err);
    if (Array.isArray(err.errors)) queue.push(...err.errors);
    if (err.cause) queue.push(err.cause);
  }
  return out;
}
