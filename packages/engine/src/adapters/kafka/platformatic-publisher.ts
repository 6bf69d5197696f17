import { ProduceAcks, Producer, stringSerializer } from '@platformatic/kafka';
import type { ConnectionOptions as TlsOptions } from 'node:tls';
import type { OutboundMessage, Publisher, PublishOptions, PublishOutcome } from '../../ports/publisher.ts';
import { partitionForKey } from '../../envelope/key-partition.ts';
import { BrokerError } from '../../errors.ts';
import type { KafkaConnection } from './client.ts';
import { toKafkaHeaders } from './headers.ts';
import { classifyPlatformaticError } from './platformatic-classify.ts';
import type { KafkaPublisherOptions } from './publisher.ts';
import { SendQueue, unsent } from './send-queue.ts';

type KafkaProducer = Producer<Buffer, Buffer, string, string>;

/**
 * Publisher over one idempotent @platformatic/kafka producer (acks = all): the same contract and the same
 * placement as the kafkajs adapter (publisher.ts) — records keyed by aggregate, placed by murmur2 of the key
 * masked positive modulo the topic's partitions (the Java client's and kafkajs' choice), one outcome per message,
 * a base offset per partition and the records of one partition stored in the order given — with its record
 * encoding, which relays ≈ 1.5× kafkajs on one thread (bench/RESULTS.md).
 *
 * On a failed send the client itself forgets its producer id and numbers (the next send starts a new idempotent
 * producer), so nothing sent later reuses the failed request's sequence numbers. Sends are still one at a time
 * (send-queue.ts), and a send with no answer within twice the ack timeout closes its producer for a new one;
 * requests time out after `requestTimeoutMs`, so the client's own retries (same numbers: the broker drops a
 * repeat) come first.
 */
export class PlatformaticKafkaPublisher implements Publisher {
  readonly #options: KafkaPublisherOptions;
  #producer: KafkaProducer;
  readonly #queue: SendQueue;
  #closed = false;

  constructor(options: KafkaPublisherOptions) {
    this.#options = options;
    this.#producer = this.#newProducer();
    const ackTimeoutMs = options.ackTimeoutMs ?? 10_000;
    this.#queue = new SendQueue((messages) => {
      const producer = this.#producer;
      return { result: this.#send(producer, messages), abandon: () => this.#renew(producer) };
    }, 2 * ackTimeoutMs);
  }

  /** One send at a time, by the deadline, oversize batches split: send-queue.ts. */
  publish(messages: OutboundMessage[], options: PublishOptions = {}): Promise<PublishOutcome[]> {
    return this.#queue.publish(messages, options);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#queue.idle();
    await this.#producer.close().catch(() => {});
  }

  #newProducer(): KafkaProducer {
    const o = this.#options;
    return new Producer<Buffer, Buffer, string, string>({
      clientId: `${o.clientId ?? 'postbox'}`,
      bootstrapBrokers: o.brokers,
      idempotent: true,
      acks: ProduceAcks.ALL,
      autocreateTopics: false,
      connectTimeout: o.connectionTimeoutMs ?? 3000,
      requestTimeout: o.requestTimeoutMs ?? 10_000,
      timeout: o.ackTimeoutMs ?? 10_000,
      // Within one call the client may retry a request (the idempotent numbers make that duplicate-free); across
      // calls the relay's durable backoff is the only retry layer.
      retries: 3,
      retryDelay: 250,
      serializers: { headerKey: stringSerializer, headerValue: stringSerializer },
      ...tlsAndSasl(o),
    });
  }

  #renew(abandoned: KafkaProducer): void {
    if (this.#producer !== abandoned || this.#closed) return;
    this.#producer = this.#newProducer();
    void abandoned.close(true).catch(() => {});
  }

  async #send(producer: KafkaProducer, messages: OutboundMessage[]): Promise<PublishOutcome[]> {
    let partitions: number[];
    try {
      partitions = await partitionsOf(producer, messages);
    } catch (cause) {
      // Nothing was sent yet: whatever failed, no record can have been stored.
      const error = toBrokerError(cause);
      return unsent(
        messages,
        error.kind === 'unknown'
          ? new BrokerError(error.code, 'transient', error.message, { cause, ...permanentAfterOf(error) })
          : error,
      );
    }
    try {
      const result = await producer.send({
        acks: ProduceAcks.ALL,
        messages: messages.map((m, i) => ({
          topic: m.topic,
          partition: partitions[i]!,
          key: Buffer.from(m.key),
          value: m.value,
          headers: toKafkaHeaders(m.headers),
        })),
      });
      return confirmations(messages, partitions, result.offsets ?? []);
    } catch (cause) {
      return unsent(messages, toBrokerError(cause));
    }
  }
}

/**
 * Each message's partition: murmur2 of its key, masked positive, modulo the topic's partition count (the
 * engine's partitionForKey, the placement the conformance suite checks). The client applies the same count.
 */
async function partitionsOf(producer: KafkaProducer, messages: OutboundMessage[]): Promise<number[]> {
  const topics = [...new Set(messages.map((m) => m.topic))];
  // The client keeps the cluster's metadata (metadataMaxAge): a lookup per send, not a request.
  const metadata = await producer.metadata({ topics });
  const counts = new Map<string, number>();
  for (const topic of topics) {
    const count = metadata.topics.get(topic)?.partitionsCount;
    if (!count) {
      throw new BrokerError(
        'kafka_unknown_topic_or_partition',
        'transient',
        `kafka (@platformatic/kafka): topic ${topic} has no partitions in the cluster metadata`,
        { permanentAfter: 8 },
      );
    }
    counts.set(topic, count);
  }
  return messages.map((m) => partitionForKey(m.key, counts.get(m.topic)!));
}

function confirmations(
  messages: OutboundMessage[],
  partitions: number[],
  offsets: ReadonlyArray<{ topic: string; partition: number; offset: bigint }>,
): PublishOutcome[] {
  const base = new Map(offsets.map((o) => [`${o.topic}\u0000${o.partition}`, o.offset]));
  const seen = new Map<string, bigint>();
  return messages.map((m, i) => {
    const slot = `${m.topic}\u0000${partitions[i]}`;
    const index = seen.get(slot) ?? 0n;
    seen.set(slot, index + 1n);
    const first = base.get(slot);
    if (first === undefined) {
      const where = `${m.topic}/${partitions[i]}`;
      return {
        ok: false,
        error: new BrokerError('kafka_no_offset', 'unknown', `kafka: the broker returned no offset for ${where}`),
      };
    }
    return { ok: true, confirmation: { partition: partitions[i]!, offset: (first + index).toString() } };
  });
}

function permanentAfterOf(error: BrokerError): { permanentAfter?: number } {
  return error.permanentAfter === undefined ? {} : { permanentAfter: error.permanentAfter };
}

function toBrokerError(cause: unknown): BrokerError {
  const error = classifyPlatformaticError(cause);
  return error instanceof BrokerError ? error : new BrokerError(error.code, error.kind, error.message, { cause });
}

/** KafkaConnection's TLS and SASL (kafkajs' shapes, the engine's configuration) in the client's terms. */
function tlsAndSasl(o: KafkaConnection): {
  tls?: TlsOptions;
  sasl?: { mechanism: never; username: string; password: string };
} {
  const out: { tls?: TlsOptions; sasl?: { mechanism: never; username: string; password: string } } = {};
  if (o.ssl) out.tls = o.ssl === true ? {} : o.ssl;
  if (o.sasl) {
    const sasl = o.sasl as { mechanism: string; username?: string; password?: string };
    const mechanism = MECHANISMS[sasl.mechanism];
    if (!mechanism) {
      throw new BrokerError(
        'kafka_sasl_mechanism',
        'permanent',
        `kafka (@platformatic/kafka): SASL mechanism ${sasl.mechanism} is not supported here (plain, scram-sha-256, scram-sha-512)`,
      );
    }
    out.sasl = { mechanism: mechanism as never, username: sasl.username ?? '', password: sasl.password ?? '' };
  }
  return out;
}

const MECHANISMS: Record<string, string> = {
  plain: 'PLAIN',
  'scram-sha-256': 'SCRAM-SHA-256',
  'scram-sha-512': 'SCRAM-SHA-512',
};
