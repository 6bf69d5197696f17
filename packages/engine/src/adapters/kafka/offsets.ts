import type { Admin } from 'kafkajs';
import { BrokerError } from '../../errors.ts';
import type { BrokerOffsets, PartitionPosition } from '../../ports/offsets.ts';
import { createKafka, type KafkaConnection } from './client.ts';

/** BrokerOffsets over the kafkajs admin client, connected on first use and again after a failure. */
export class KafkaOffsets implements BrokerOffsets {
  readonly #admin: Admin;
  #connected: Promise<void> | null = null;
  #closed = false;

  constructor(connection: KafkaConnection) {
    this.#admin = createKafka({ ...connection, clientId: `${connection.clientId ?? 'postbox'}-control` }).admin();
  }

  async positions(groupId: string | null, topics: string[]): Promise<PartitionPosition[]> {
    await this.#connect();
    try {
      const committed = new Map<string, string | null>();
      if (groupId !== null && topics.length > 0) {
        for (const t of await this.#admin.fetchOffsets({ groupId, topics })) {
          for (const p of t.partitions) committed.set(`${t.topic}/${p.partition}`, p.offset === '-1' ? null : p.offset);
        }
      }
      const out: PartitionPosition[] = [];
      for (const topic of topics) {
        for (const p of await this.#admin.fetchTopicOffsets(topic)) {
          out.push({
            topic,
            partition: p.partition,
            high: p.high,
            committed: committed.get(`${topic}/${p.partition}`) ?? null,
          });
        }
      }
      return out.sort((a, b) => (a.topic === b.topic ? a.partition - b.partition : a.topic < b.topic ? -1 : 1));
    } catch (cause) {
      // The admin reconnects by itself on the next request; a failed request (an unknown topic) leaves it connected.
      throw new BrokerError(
        'broker_unavailable',
        'transient',
        `reading broker offsets failed: ${(cause as Error).message}`,
        { cause },
      );
    }
  }

  async ping(): Promise<void> {
    await this.#connect();
    try {
      await this.#admin.describeCluster();
    } catch (cause) {
      throw new BrokerError('broker_unavailable', 'transient', `broker did not answer: ${(cause as Error).message}`, {
        cause,
      });
    }
  }

  /** Waits for a connect in flight (a connection made after close would keep the process alive). */
  async close(): Promise<void> {
    this.#closed = true;
    const connecting = this.#connected;
    this.#connected = null;
    await connecting?.catch(() => {});
    await this.#admin.disconnect().catch(() => {});
  }

  #connect(): Promise<void> {
    if (this.#closed)
      return Promise.reject(new BrokerError('broker_closed', 'permanent', 'broker offsets reader is closed'));
    this.#connected ??= this.#admin.connect().catch((cause: unknown) => {
      this.#connected = null;
      throw new BrokerError('broker_unavailable', 'transient', `cannot reach the broker: ${(cause as Error).message}`, {
        cause,
      });
    });
    return this.#connected;
  }
}
