import { JetStreamApiError } from '@nats-io/jetstream';
import { BrokerError, PostboxError, type ErrorKind } from '../../errors.ts';

// JetStream API error codes that no retry fixes.
const PERMANENT_API_CODES = new Map([
  [10054, 'message_too_large'], // JSStreamMessageExceedsMaximumErr
]);

/**
 * Maps a nats.js error (by its name: not every class is exported) to Postbox's error tree. A request that timed
 * out may have been stored (`unknown`); no responders means no stream listens on the subject, or JetStream is
 * off: transient a few times, then permanent, as for a Kafka topic that does not exist; a message over the
 * server's max_payload is refused before it is sent (permanent).
 */
export function classifyNatsError(error: unknown): PostboxError {
  if (error instanceof PostboxError) return error;
  const name = error instanceof Error ? error.name : 'Error';
  const text = error instanceof Error ? error.message : String(error);
  const make = (code: string, kind: ErrorKind, permanentAfter?: number) =>
    new BrokerError(code, kind, `nats: ${text}`, { cause: error, ...(permanentAfter ? { permanentAfter } : {}) });
  if (name === 'TimeoutError') return make('nats_timeout', 'unknown');
  if (name === 'JetStreamNotEnabled' || name === 'NoRespondersError') return make('nats_no_stream', 'transient', 8);
  if (name === 'InvalidArgumentError' && /max_payload/.test(text)) return make('message_too_large', 'permanent');
  if (error instanceof JetStreamApiError) {
    const permanent = PERMANENT_API_CODES.get(error.code);
    return permanent ? make(permanent, 'permanent') : make(`nats_api_${error.code}`, 'transient');
  }
  const snake = name
    .replace(/Error$/, '')
    .replace(/([a-z])([A-Z])/g, '$1_$2')
    .toLowerCase();
  return make(`nats_${snake || 'error'}`, 'transient');
}
