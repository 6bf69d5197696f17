import { Partitioners, type Message, type Producer, type RecordMetadata } from 'kafkajs';
import { classifyKafkaError } from './classify.ts';
import { createKafka, type KafkaConnection } from './client.ts';
import type { OutboundMessage, Publisher, PublishOutcome } from '../../ports/publisher.ts';

export interface KafkaPublisherOptions extends KafkaConnection {
  /** Broker acknowledgement timeout. @defaultValue 10000 */
  ackTimeoutMs?: number;
}

/**
 * Publisher over one idempotent kafkajs producer (acks = all). Records are keyed, partitioned by murmur2 of the
 * key (the Java client's choice, so other clients agree on placement), and confirmed per record: Kafka returns
 * a base offset per partition and records of one partition are stored in the order sent.
 */
export class KafkaPublisher implements Publisher {
  readonly #producer: Producer;
  readonly #ackTimeoutMs: number;
  // The partitioner is the one place kafkajs reveals which partition it chose for each message.
  readonly #chosen = new WeakMap<Message, number>();
  #connecting: Promise<void> | null = null;
  #closed = false;

  constructor(options: KafkaPublisherOptions) {
    const chosen = this.#chosen;
    const murmur2 = Partitioners.DefaultPartitioner;
    this.#producer = createKafka(options).producer({
      idempotent: true,
      maxInFlightRequests: 1,
      allowAutoTopicCreation: false,
      createPartitioner: () => {
        const partition = murmur2();
        return (args) => {
          const p = partition(args);
          chosen.set(args.message, p);
          return p;
        };
      },
    });
    this.#ackTimeoutMs = options.ackTimeoutMs ?? 10_000;
  }

  async publish(messages: OutboundMessage[]): Promise<PublishOutcome[]> {
    if (messages.length === 0) return [];
    const byTopic = new Map<string, Message[]>();
    const sent: Message[] = messages.map((m) => {
      const message: Message = { key: m.key, value: m.value, headers: m.headers };
      const list = byTopic.get(m.topic) ?? [];
      list.push(message);
      byTopic.set(m.topic, list);
      return message;
    });
    let metadata: RecordMetadata[];
    try {
      await this.#connect();
      metadata = await this.#producer.sendBatch({
        acks: -1,
        timeout: this.#ackTimeoutMs,
        topicMessages: [...byTopic].map(([topic, list]) => ({ topic, messages: list })),
      });
    } catch (cause) {
      const error = classifyKafkaError(cause);
      return messages.map(() => ({ ok: false, error }));
    }
    return confirmations(messages, sent, metadata, this.#chosen);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#producer.disconnect().catch(() => {});
  }

  #connect(): Promise<void> {
    if (!this.#connecting) {
      this.#connecting = this.#producer.connect().catch((cause: unknown) => {
        this.#connecting = null;
        throw cause;
      });
    }
    return this.#connecting;
  }
}

function confirmations(
  messages: OutboundMessage[],
  sent: Message[],
  metadata: RecordMetadata[],
  chosen: WeakMap<Message, number>,
): PublishOutcome[] {
  const base = new Map<string, bigint>();
  for (const m of metadata) base.set(`${m.topicName}\u0000${m.partition}`, BigInt(m.baseOffset ?? '-1'));
  const seen = new Map<string, bigint>();
  return messages.map((m, i) => {
    const partition = chosen.get(sent[i]!)!;
    const slot = `${m.topic}\u0000${partition}`;
    const index = seen.get(slot) ?? 0n;
    seen.set(slot, index + 1n);
    const offset = (base.get(slot) ?? -1n) + index;
    return { ok: true, confirmation: { partition, offset: offset.toString() } };
  });
}
