import { BrokerError, PostboxError, type ErrorKind } from '../../errors.ts';

// Protocol errors that no retry fixes without a change of configuration or message (either client's adapter).
export const PERMANENT_TYPES: ReadonlySet<string> = new Set([
  'MESSAGE_TOO_LARGE',
  'RECORD_LIST_TOO_LARGE',
  'INVALID_RECORD',
  'CORRUPT_MESSAGE',
  'INVALID_TOPIC_EXCEPTION',
  'TOPIC_AUTHORIZATION_FAILED',
  'CLUSTER_AUTHORIZATION_FAILED',
  'SASL_AUTHENTICATION_FAILED',
  'INVALID_REQUIRED_ACKS',
  'UNSUPPORTED_VERSION',
]);

// Retried a few times, then permanent. A topic just created is not yet known to every broker (its metadata
// propagates), so the first refusals are transient; a topic still unknown after that is misconfiguration, and
// retrying it for hours would hold up its lane's other events.
export const PERMANENT_AFTER: ReadonlyMap<string, number> = new Map([['UNKNOWN_TOPIC_OR_PARTITION', 8]]);

// The broker may have appended the records before the failure reached us.
const UNKNOWN_NAMES = new Set(['KafkaJSRequestTimeoutError']);

interface KafkaLikeError {
  name?: string;
  type?: string;
  retriable?: boolean;
  cause?: unknown;
  originalError?: unknown;
}

/** Maps a kafkajs error (possibly wrapped in retry errors) to Postbox's error tree. */
export function classifyKafkaError(error: unknown): PostboxError {
  if (error instanceof PostboxError) return error;
  const root = rootCause(error);
  const type = root.type;
  let kind: ErrorKind = 'transient';
  if (type && PERMANENT_TYPES.has(type)) kind = 'permanent';
  else if (root.name && UNKNOWN_NAMES.has(root.name)) kind = 'unknown';
  const code = type
    ? `kafka_${type.toLowerCase()}`
    : `kafka_${(root.name ?? 'error').replace(/^KafkaJS/, '').toLowerCase()}`;
  const message = error instanceof Error ? error.message : String(error);
  const permanentAfter = type ? PERMANENT_AFTER.get(type) : undefined;
  return new BrokerError(code, kind, `kafka: ${message}`, {
    cause: error,
    ...(permanentAfter ? { permanentAfter } : {}),
  });
}

function rootCause(error: unknown): KafkaLikeError {
  let current = error as KafkaLikeError;
  for (let depth = 0; depth < 5; depth++) {
    if (current?.type) return current;
    const next = (current?.originalError ?? current?.cause) as KafkaLikeError | undefined;
    if (!next || typeof next !== 'object') break;
    current = next;
  }
  return (current ?? {}) as KafkaLikeError;
}
