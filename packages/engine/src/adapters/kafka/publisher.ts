import { Partitioners, type Message, type Producer, type RecordMetadata } from 'kafkajs';
import { classifyKafkaError } from './classify.ts';
import { confirmations } from './confirmations.ts';
import { createKafka, type KafkaConnection } from './client.ts';
import { toKafkaHeaders } from './headers.ts';
import { SendQueue } from './send-queue.ts';
import { SocketFence } from './socket-fence.ts';
import type { OutboundMessage, Publisher, PublishOptions, PublishOutcome } from '../../ports/publisher.ts';

export interface KafkaPublisherOptions extends KafkaConnection {
  /** Broker acknowledgement timeout. @defaultValue 10000 */
  ackTimeoutMs?: number;
}

/**
 * Publisher over one idempotent kafkajs producer (acks = all). Records are keyed, partitioned by murmur2 of the
 * key (the Java client's choice, so other clients agree on placement), and confirmed per record: Kafka returns
 * a base offset per partition and records of one partition are stored in the order sent.
 *
 * A failed send replaces the producer (a new idempotent producer id, sequence numbers from 0). kafkajs rolls
 * back the sequence numbers of every partition of a failed request, also of the partitions the broker did append
 * (one partition's error fails the whole request): the next send to those would carry numbers the broker has
 * already seen — refused for ever as out of order, or, when its range happens to equal a recent batch's, taken
 * for a duplicate and dropped while "confirmed" at the old batch's offsets. A fresh producer has no such past;
 * re-sent records it appends again are the counted duplicates consumers absorb.
 *
 * For the same reason sends are one at a time per producer: kafkajs rolls a failed request's numbers back
 * before its own retry, and a second sendBatch waiting for the broker lock would take them — new records under
 * the numbers of records the broker already holds, acknowledged at those records' offsets and never stored:
 * "confirmed" events missing from the log. A send that outlives its deadline abandons its producer for a fresh
 * one, so its late retries cannot collide either.
 */
export class KafkaPublisher implements Publisher {
  readonly #options: KafkaPublisherOptions;
  #producer: Producer;
  readonly #ackTimeoutMs: number;
  // The partitioner is the one place kafkajs reveals which partition it chose for each message.
  readonly #chosen = new WeakMap<Message, number>();
  readonly #fences = new WeakMap<Producer, SocketFence>();
  #connecting: { producer: Producer; promise: Promise<void> } | null = null;
  readonly #queue: SendQueue;
  #closed = false;

  constructor(options: KafkaPublisherOptions) {
    this.#options = options;
    this.#producer = this.#newProducer();
    this.#ackTimeoutMs = options.ackTimeoutMs ?? 10_000;
    this.#queue = new SendQueue((messages) => {
      const producer = this.#producer;
      return { result: this.#send(producer, messages), abandon: () => this.#renew(producer) };
    }, 2 * this.#ackTimeoutMs);
  }

  #newProducer(): Producer {
    const chosen = this.#chosen;
    const murmur2 = Partitioners.DefaultPartitioner;
    const fence = new SocketFence();
    const producer = createKafka(this.#options, fence.factory).producer({
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
    this.#fences.set(producer, fence);
    return producer;
  }

  /**
   * Replaces a producer whose send failed (see the class comment). The old one's connections are reset first, so
   * no request of it still queued in the kernel reaches the broker later (socket-fence.ts); then it is
   * disconnected in the background.
   */
  #renew(failed: Producer): void {
    if (this.#producer !== failed || this.#closed) return;
    this.#producer = this.#newProducer();
    this.#connecting = null;
    this.#fences.get(failed)?.cut();
    void failed.disconnect().catch(() => {});
  }

  /** One send at a time, by the deadline, oversize batches split: send-queue.ts. */
  publish(messages: OutboundMessage[], options: PublishOptions = {}): Promise<PublishOutcome[]> {
    return this.#queue.publish(messages, options);
  }

  async #send(producer: Producer, messages: OutboundMessage[]): Promise<PublishOutcome[]> {
    const byTopic = new Map<string, Message[]>();
    const sent: Message[] = messages.map((m) => {
      const message: Message = { key: m.key, value: m.value, headers: toKafkaHeaders(m.headers) };
      const list = byTopic.get(m.topic) ?? [];
      list.push(message);
      byTopic.set(m.topic, list);
      return message;
    });
    let metadata: RecordMetadata[];
    try {
      await this.#connect(producer);
    } catch (cause) {
      // A failed connect can leave kafkajs's seed broker with an open socket and no API versions (its ApiVersions
      // request timed out against a hung broker): every later connect of that producer returns at once and its
      // metadata request throws "Broker not connected", for ever. Only a fresh client gets out (fault suite:
      // broker SIGSTOP, then SIGCONT).
      this.#renew(producer);
      const error = classifyKafkaError(cause);
      return messages.map(() => ({ ok: false, error }));
    }
    try {
      metadata = await producer.sendBatch({
        acks: -1,
        timeout: this.#ackTimeoutMs,
        topicMessages: [...byTopic].map(([topic, list]) => ({ topic, messages: list })),
      });
    } catch (cause) {
      this.#renew(producer);
      const error = classifyKafkaError(cause);
      return messages.map(() => ({ ok: false, error }));
    }
    const outcomes = confirmations(messages, sent, metadata, this.#chosen);
    // A partition the broker did not confirm leaves the producer's sequence numbers for it uncertain.
    if (outcomes.some((o) => !o.ok)) this.#renew(producer);
    return outcomes;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#queue.idle();
    await this.#producer.disconnect().catch(() => {});
  }

  #connect(producer: Producer): Promise<void> {
    if (this.#connecting?.producer !== producer) {
      const connecting = {
        producer,
        promise: producer.connect().catch((cause: unknown) => {
          if (this.#connecting === connecting) this.#connecting = null;
          throw cause;
        }),
      };
      this.#connecting = connecting;
    }
    return this.#connecting.promise;
  }
}
