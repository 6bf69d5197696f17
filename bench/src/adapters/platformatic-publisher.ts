import {
  compatibilityPartitioner,
  findErrorBy,
  ProduceAcks,
  Producer,
  stringSerializer,
  type GenericError,
} from '@platformatic/kafka';
import { BrokerError } from '@postbox/engine';
import type { KafkaConnection } from '@postbox/engine/kafka';
import type { OutboundMessage, Publisher, PublishOutcome } from '@postbox/engine/runtime';

// Protocol errors no retry fixes (the engine's kafkajs adapter treats the same ones as permanent).
const PERMANENT = new Set([
  'MESSAGE_TOO_LARGE',
  'RECORD_LIST_TOO_LARGE',
  'INVALID_RECORD',
  'CORRUPT_MESSAGE',
  'INVALID_TOPIC_EXCEPTION',
  'UNKNOWN_TOPIC_OR_PARTITION',
  'TOPIC_AUTHORIZATION_FAILED',
  'CLUSTER_AUTHORIZATION_FAILED',
  'INVALID_REQUIRED_ACKS',
  'UNSUPPORTED_VERSION',
]);

/**
 * Postbox's Publisher port over @platformatic/kafka, the alternative adapter the bench compares with the engine's
 * kafkajs one. Same contract: one idempotent producer, acks = all, records keyed by aggregate and placed by
 * murmur2 of the key masked positive (the Java client's and kafkajs' choice, so both adapters agree on placement),
 * one outcome per message, no retry across calls. Offsets: the broker returns a base offset per partition and a
 * partition stores the records of one send in the order given.
 */
export class PlatformaticPublisher implements Publisher {
  readonly #producer: Producer<Buffer, Buffer, string, string>;
  readonly #partitions = new Map<string, number>();
  #closed: Promise<void> | null = null;

  constructor(connection: KafkaConnection) {
    this.#producer = new Producer({
      clientId: `${connection.clientId ?? 'postbox'}-platformatic`,
      bootstrapBrokers: connection.brokers,
      idempotent: true,
      acks: ProduceAcks.ALL,
      autocreateTopics: false,
      serializers: { headerKey: stringSerializer, headerValue: stringSerializer },
    });
  }

  async publish(messages: OutboundMessage[]): Promise<PublishOutcome[]> {
    if (messages.length === 0) return [];
    try {
      const partitions = await Promise.all(messages.map((m) => this.#partitionOf(m)));
      const result = await this.#producer.send({
        acks: ProduceAcks.ALL,
        messages: messages.map((m, i) => ({
          topic: m.topic,
          partition: partitions[i]!,
          key: Buffer.from(m.key),
          value: m.value,
          headers: m.headers,
        })),
      });
      const base = new Map((result.offsets ?? []).map((o) => [`${o.topic}\u0000${o.partition}`, o.offset]));
      const seen = new Map<string, bigint>();
      return messages.map((m, i) => {
        const slot = `${m.topic}\u0000${partitions[i]}`;
        const index = seen.get(slot) ?? 0n;
        seen.set(slot, index + 1n);
        const first = base.get(slot);
        if (first === undefined)
          return {
            ok: false,
            error: new BrokerError(
              'platformatic_no_offset',
              'unknown',
              `no offset returned for ${slot.replace('\u0000', '/')}`,
            ),
          };
        return { ok: true, confirmation: { partition: partitions[i]!, offset: (first + index).toString() } };
      });
    } catch (cause) {
      const error = classify(cause);
      return messages.map(() => ({ ok: false, error }));
    }
  }

  close(): Promise<void> {
    this.#closed ??= this.#producer.close().catch(() => {});
    return this.#closed;
  }

  async #partitionOf(m: OutboundMessage): Promise<number> {
    let count = this.#partitions.get(m.topic);
    if (count === undefined) {
      const metadata = await this.#producer.metadata({ topics: [m.topic] });
      count = metadata.topics.get(m.topic)?.partitionsCount;
      if (!count)
        throw new BrokerError(
          'platformatic_unknown_topic',
          'permanent',
          `topic ${m.topic} has no partitions in the cluster metadata`,
        );
      this.#partitions.set(m.topic, count);
    }
    return compatibilityPartitioner(undefined as never, Buffer.from(m.key)) % count;
  }
}

function classify(cause: unknown): BrokerError {
  if (cause instanceof BrokerError) return cause;
  const error = cause as Error;
  const protocol = findErrorBy<GenericError>(error, 'code', 'PLT_KFK_PROTOCOL');
  const apiId = protocol?.apiId as string | undefined;
  const timeout = findErrorBy<GenericError>(error, 'code', 'PLT_KFK_TIMEOUT');
  const kind = apiId && PERMANENT.has(apiId) ? 'permanent' : timeout ? 'unknown' : 'transient';
  const code = apiId
    ? `kafka_${apiId.toLowerCase()}`
    : `platformatic_${String((error as GenericError)?.code ?? 'error').toLowerCase()}`;
  return new BrokerError(code, kind, `kafka (@platformatic/kafka): ${error?.message ?? String(cause)}`, { cause });
}
