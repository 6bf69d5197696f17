import type { MessageHeaders } from '../envelope/headers.ts';
import type { PostboxError } from '../errors.ts';

/**
 * One record for the broker. `value` is sent byte for byte; `headers` are broker-neutral (the CloudEvents
 * attributes by name and the trace context, envelope/headers.ts): the adapter maps them to its protocol binding.
 */
export interface OutboundMessage {
  topic: string;
  key: string;
  value: Buffer;
  headers: MessageHeaders;
}

/** Where the broker durably stored a message. */
export interface Confirmation {
  partition: number;
  /**
   * A decimal string: Kafka offsets are 64-bit; a JetStream stream sequence. Absent on brokers whose queues have
   * no positions (RabbitMQ): the partition alone is stored.
   */
  offset?: string;
  /**
   * The broker had this message id already (JetStream's duplicate window): stored once, and `offset` is where
   * the first send landed. Absent on brokers without broker-side deduplication.
   */
  duplicate?: boolean;
}

export interface PublishOptions {
  /** Resolve within this many ms, confirmed or not. */
  timeoutMs?: number;
}

export type PublishOutcome = { ok: true; confirmation: Confirmation } | { ok: false; error: PostboxError };

/**
 * The only door from Postbox to a broker for sending (the Watermill shape).
 *
 * Contract:
 * - `publish` resolves with exactly one outcome per message, in the same order; it does not throw for broker
 *   failures. An ok outcome means the broker confirmed durable storage (Kafka: acks = all).
 * - Messages of one key are stored in the order given.
 * - A failed outcome's error says whether a retry can help (`kind`): transient, permanent, or unknown (the
 *   broker may have stored it). The caller retries with the same message; adapters add no retry layer across
 *   calls of their own.
 * - With `timeoutMs`, it resolves by then: what is not confirmed gets an `unknown` outcome, and nothing of
 *   that call is sent afterwards under the sequence the next call uses.
 * - `close` is idempotent and waits for in-flight sends.
 */
export interface Publisher {
  publish(messages: OutboundMessage[], options?: PublishOptions): Promise<PublishOutcome[]>;
  close(): Promise<void>;
}
