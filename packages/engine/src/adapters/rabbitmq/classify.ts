import { BrokerError, PostboxError, type ErrorKind } from '../../errors.ts';

/**
 * Maps an @cloudamqp/amqp-client error to Postbox's error tree, by its text (the client raises one AMQPError
 * class for everything): a channel or connection that closed while a publish awaited its confirm may have stored
 * it (`unknown`); a negative confirm (a quorum queue over its limit), a blocked connection (a memory or disk
 * alarm), a refused connection are transient; a message over the server's max_message_size is permanent.
 */
export function classifyRabbitError(error: unknown): PostboxError {
  if (error instanceof PostboxError) return error;
  const text = error instanceof Error ? error.message : String(error);
  const make = (code: string, kind: ErrorKind) => new BrokerError(code, kind, `rabbitmq: ${text}`, { cause: error });
  if (/larger than configured max size|max_message_size/i.test(text)) return make('message_too_large', 'permanent');
  if (/message rejected/i.test(text)) return make('rabbitmq_nack', 'transient');
  if (/blocked/i.test(text)) return make('rabbitmq_blocked', 'transient');
  if (/closed/i.test(text)) return make('rabbitmq_closed', 'unknown');
  return make('rabbitmq_error', 'transient');
}
