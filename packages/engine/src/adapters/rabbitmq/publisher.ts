import { randomUUID } from 'node:crypto';
import { type AMQPBaseClient, type AMQPChannel, type AMQPMessage } from '@cloudamqp/amqp-client';
import { partitionForKey } from '../../envelope/key-partition.ts';
import { BrokerError, type PostboxError } from '../../errors.ts';
import type { OutboundMessage, Publisher, PublishOptions, PublishOutcome } from '../../ports/publisher.ts';
import { classifyRabbitError } from './classify.ts';
import { connectRabbit } from './connection.ts';
import { sendPerKey } from '../per-key-sends.ts';
import { KEY_HEADER, toAmqpHeaders } from './headers.ts';

export interface RabbitPublisherOptions {
  /** amqp://user:pass@host:port/vhost */
  url: string;
  /** Partitions per topic, as ensureExchanges made them. */
  partitions: ReadonlyMap<string, number>;
  /**
   * Larger messages fail for good before they are sent (the stack's node refuses them too, closing the channel
   * and with it every publish in flight on it). @defaultValue 1048576, NATS' max_payload
   */
  maxMessageBytes?: number;
  /** A publish's deadline when the caller gives none. @defaultValue 10000 */
  ackTimeoutMs?: number;
}

/**
 * Publisher port over RabbitMQ (AMQP 0-9-1, publisher confirms). Each message goes to its topic's exchange with
 * routing key = its partition (computed from its key exactly as Kafka's client does), persistent, `mandatory`:
 * a message no queue takes comes back (basic.return, before its confirm) and fails for good — a broker "ack" of
 * a message that reached no queue is never reported as confirmed. `message_id` = the event id (RabbitMQ does not
 * deduplicate: the inbox absorbs a re-send). A nack (a quorum queue over its limit) is transient. The
 * confirmation is the partition alone: queues have no positions.
 *
 * Order: messages of one key are sent one after the other, each once the previous one is confirmed; keys go in
 * parallel on one channel. A message that fails transiently or with an unknown outcome stops its key there.
 */
export class RabbitPublisher implements Publisher {
  readonly #options: RabbitPublisherOptions;
  #client: Promise<{ connection: AMQPBaseClient; channel: AMQPChannel }> | null = null;
  /** Tokens of sends the broker returned as unroutable, until their confirm arrives. */
  readonly #returned = new Set<string>();
  /** Each send's token: `<prefix>-<n>`, unique to this publisher. */
  readonly #tokenPrefix = randomUUID().slice(0, 8);
  #sends = 0;
  #closed = false;

  constructor(options: RabbitPublisherOptions) {
    this.#options = options;
  }

  async publish(messages: OutboundMessage[], options: PublishOptions = {}): Promise<PublishOutcome[]> {
    if (messages.length === 0) return [];
    if (this.#closed) return messages.map(() => failed(new BrokerError('publisher_closed', 'transient', 'closed')));
    const deadline = Date.now() + (options.timeoutMs ?? this.#options.ackTimeoutMs ?? 10_000);
    let channel: AMQPChannel;
    try {
      channel = await withDeadline(this.#connected(), deadline);
    } catch (cause) {
      const error = classifyRabbitError(cause);
      return messages.map(() => failed(error));
    }
    return sendPerKey(messages, deadline, (m) => this.#sendOne(channel, m, deadline));
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const client = await this.#client?.catch(() => null);
    await client?.connection.close().catch(() => {});
  }

  async #sendOne(channel: AMQPChannel, m: OutboundMessage, deadline: number): Promise<PublishOutcome> {
    const partitions = this.#options.partitions.get(m.topic);
    if (partitions === undefined)
      return failed(new BrokerError('rabbitmq_unknown_topic', 'permanent', `topic ${m.topic} was not set up`));
    const partition = partitionForKey(m.key, partitions);
    const limit = this.#options.maxMessageBytes ?? 1024 * 1024;
    if (m.value.length > limit)
      return failed(
        new BrokerError('message_too_large', 'permanent', `message of ${m.value.length} bytes is over ${limit} bytes`),
      );
    const token = `${this.#tokenPrefix}-${this.#sends++}`;
    const { headers, contentType } = toAmqpHeaders({ ...m.headers, [KEY_HEADER]: m.key });
    try {
      await withDeadline(
        channel.basicPublish(
          m.topic,
          String(partition),
          m.value,
          {
            deliveryMode: 2,
            ...(m.headers.id ? { messageId: m.headers.id } : {}),
            // Matches a return to this send: an event id can be in flight twice (a retry after an unknown outcome).
            headers: { ...headers, [SEND_HEADER]: token },
            ...(contentType === undefined ? {} : { contentType }),
          },
          true,
        ),
        deadline,
        'unknown',
      );
    } catch (cause) {
      this.#returned.delete(token);
      // No confirm by the deadline: the connection may be half-open; the next publish opens a fresh one.
      if (cause instanceof BrokerError && cause.code === 'publish_timeout') this.#reconnect();
      return failed(classifyRabbitError(cause));
    }
    if (this.#returned.delete(token))
      return failed(
        new BrokerError(
          'rabbitmq_unroutable',
          'permanent',
          `no queue is bound for ${m.topic} partition ${partition}: start the topic's consumer groups first (RabbitMQ keeps no log)`,
        ),
      );
    return { ok: true, confirmation: { partition } };
  }

  /** Drops the current connection (closing it): the next publish connects again, with no returns pending. */
  #reconnect(): void {
    const old = this.#client;
    this.#client = null;
    this.#returned.clear();
    void old?.then(({ connection }) => connection.close()).catch(() => {});
  }

  #connected(): Promise<AMQPChannel> {
    if (!this.#client) {
      const client = (async () => {
        const connection = await connectRabbit(this.#options.url);
        try {
          const channel = await connection.channel();
          await channel.confirmSelect();
          channel.onReturn = (message: AMQPMessage) => {
            const token = message.properties.headers?.[SEND_HEADER];
            if (typeof token === 'string') this.#returned.add(token);
          };
          return { connection, channel };
        } catch (cause) {
          await connection.close().catch(() => {});
          throw cause;
        }
      })();
      // A failed connect, or a channel the broker closed, is opened again by the next publish.
      client.catch(() => {
        if (this.#client === client) this.#client = null;
      });
      this.#client = client;
    }
    const current = this.#client;
    return current.then(({ connection, channel }) => {
      if (channel.closed || connection.closed) {
        if (this.#client === current) this.#reconnect();
        return this.#connected();
      }
      return channel;
    });
  }
}

/** The header a send's token travels in (outside the CloudEvents binding: a subscriber never reads it). */
const SEND_HEADER = 'x-postbox-send';

function failed(error: PostboxError): PublishOutcome {
  return { ok: false, error };
}

/** The promise, or a failure of `kind` once the deadline passes (the send itself may still land: unknown). */
function withDeadline<T>(
  promise: Promise<T>,
  deadline: number,
  kind: 'transient' | 'unknown' = 'transient',
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new BrokerError('publish_timeout', kind, 'no confirm from RabbitMQ by the deadline')),
      Math.max(0, deadline - Date.now()),
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
