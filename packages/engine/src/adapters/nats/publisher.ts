import { jetstream, jetstreamManager, type JetStreamClient } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { partitionForKey } from '../../envelope/key-partition.ts';
import { BrokerError, type PostboxError } from '../../errors.ts';
import type { OutboundMessage, Publisher, PublishOptions, PublishOutcome } from '../../ports/publisher.ts';
import { connectNats, type NatsConnectionOptions } from './client.ts';
import { classifyNatsError } from './classify.ts';
import { sendPerKey } from '../per-key-sends.ts';
import { KEY_HEADER, toNatsHeaders } from './headers.ts';
import { partitionStreams, subjectOf } from './streams.ts';

export interface NatsPublisherOptions extends NatsConnectionOptions {
  /**
   * Partitions per topic, as ensureStreams made them. A topic not named here is looked up once among the
   * streams on the server (`<topic>.<p>` subjects).
   */
  partitions?: ReadonlyMap<string, number>;
  /** A publish's deadline when the caller gives none. @defaultValue 10000 */
  ackTimeoutMs?: number;
}

/**
 * Publisher port over NATS JetStream. Each message goes to its topic's partition stream — the partition from its
 * key exactly as Kafka's client computes it (envelope/key-partition.ts) — with `Nats-Msg-Id` = the event id, so a
 * re-send within the streams' duplicate window is stored once and confirmed with the original sequence
 * (`duplicate: true`). The confirmation is (partition, stream sequence).
 *
 * Order: messages of one key are sent one after the other, each once the previous one is confirmed; keys go in
 * parallel. A message that fails transiently or with an unknown outcome stops its key there: the messages after
 * it get the same outcome unsent, so nothing overtakes a message that is to be retried. A permanent failure (a
 * message over max_payload) does not stop its neighbours, as on Kafka.
 */
export class NatsPublisher implements Publisher {
  readonly #options: NatsPublisherOptions;
  readonly #partitions = new Map<string, number>();
  #client: Promise<{ nc: NatsConnection; js: JetStreamClient }> | null = null;
  #closed = false;

  constructor(options: NatsPublisherOptions) {
    this.#options = options;
    for (const [topic, n] of options.partitions ?? []) this.#partitions.set(topic, n);
  }

  async publish(messages: OutboundMessage[], options: PublishOptions = {}): Promise<PublishOutcome[]> {
    if (messages.length === 0) return [];
    if (this.#closed) return messages.map(() => failed(new BrokerError('publisher_closed', 'transient', 'closed')));
    const deadline = Date.now() + (options.timeoutMs ?? this.#options.ackTimeoutMs ?? 10_000);
    let js: JetStreamClient;
    try {
      js = (await this.#connected()).js;
    } catch (cause) {
      const error = classifyNatsError(cause);
      return messages.map(() => failed(error));
    }
    return sendPerKey(messages, deadline, (m, timeoutMs) => this.#sendOne(js, m, timeoutMs));
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const client = await this.#client?.catch(() => null);
    // drain() waits for what is in flight, then closes.
    await client?.nc.drain().catch(() => client.nc.close());
  }

  async #sendOne(js: JetStreamClient, m: OutboundMessage, timeoutMs: number): Promise<PublishOutcome> {
    try {
      // Known topics (the usual case) cost no await per message; an unknown one is looked up once.
      const partitions = this.#partitions.get(m.topic) ?? (await this.#lookUpPartitions(m.topic));
      const partition = partitionForKey(m.key, partitions);
      const ack = await js.publish(subjectOf(m.topic, partition), m.value, {
        headers: toNatsHeaders({ ...m.headers, [KEY_HEADER]: m.key }),
        timeout: timeoutMs,
        ...(m.headers.id ? { msgID: m.headers.id } : {}),
      });
      return { ok: true, confirmation: { partition, offset: String(ack.seq), duplicate: ack.duplicate } };
    } catch (cause) {
      return failed(classifyNatsError(cause));
    }
  }

  /** The partition count of a topic not given at construction: its streams on the server, counted once. */
  async #lookUpPartitions(topic: string): Promise<number> {
    const { nc } = await this.#connected();
    const jsm = await jetstreamManager(nc);
    const count = (await partitionStreams(jsm, topic)).length;
    if (count === 0)
      throw new BrokerError('nats_no_stream', 'transient', `no stream carries topic ${topic} (${topic}.<p>)`, {
        permanentAfter: 8,
      });
    this.#partitions.set(topic, count);
    return count;
  }

  #connected(): Promise<{ nc: NatsConnection; js: JetStreamClient }> {
    if (!this.#client) {
      const client = connectNats({ ...this.#options, name: this.#options.name ?? 'postbox-relay' }).then((nc) => ({
        nc,
        js: jetstream(nc),
      }));
      // A failed first connect is tried again by the next publish.
      client.catch(() => {
        if (this.#client === client) this.#client = null;
      });
      this.#client = client;
    }
    return this.#client;
  }
}

function failed(error: PostboxError): PublishOutcome {
  return { ok: false, error };
}
