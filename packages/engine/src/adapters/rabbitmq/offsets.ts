import type { AMQPBaseClient } from '@cloudamqp/amqp-client';
import { BrokerError } from '../../errors.ts';
import type { BrokerOffsets, PartitionPosition, TopicRetention } from '../../ports/offsets.ts';
import { closeChannel, closeConnection, connectRabbit } from './connection.ts';
import { queueDepths } from './queue-depths.ts';
import { queueName } from './topology.ts';

export interface RabbitOffsetsOptions {
  url: string;
  /** Partitions per topic (POSTBOX_TOPICS'). */
  partitions: ReadonlyMap<string, number>;
}

/**
 * BrokerOffsets over RabbitMQ's queues, connected on first use. Queues have no positions: a group's partition
 * reads as committed 0 and high = its queue's ready messages, so its lag is what waits in the queue (deliveries
 * a member holds unacknowledged are not visible from outside it). Topics have no end of their own: asked without
 * a group, there are no positions (the control plane then shows no produce rate).
 */
export class RabbitOffsets implements BrokerOffsets {
  readonly #options: RabbitOffsetsOptions;
  #connection: Promise<AMQPBaseClient> | null = null;
  #closed = false;

  constructor(options: RabbitOffsetsOptions) {
    this.#options = options;
  }

  async positions(groupId: string | null, topics: string[]): Promise<PartitionPosition[]> {
    if (groupId === null) return [];
    const partitions = topics.flatMap((topic) =>
      Array.from({ length: this.#options.partitions.get(topic) ?? 0 }, (_, partition) => ({ topic, partition })),
    );
    try {
      const depths = await queueDepths(
        await this.#connect(),
        partitions.map((p) => queueName(p.topic, groupId, p.partition)),
      );
      return partitions.flatMap((p, i) => {
        const ready = depths[i];
        return ready === null || ready === undefined ? [] : [{ ...p, committed: '0', high: String(ready) }];
      });
    } catch (cause) {
      this.#drop();
      throw unavailable('reading RabbitMQ queue depths failed', cause);
    }
  }

  /** A queue removes a message once it is acknowledged: nothing consumed can come again (0). */
  async retention(topics: string[]): Promise<TopicRetention[]> {
    return topics.map((topic) => ({ topic, retentionMs: 0, source: 'RabbitMQ queues remove acknowledged messages' }));
  }

  async ping(): Promise<void> {
    const connection = await this.#connect();
    try {
      await closeChannel(await connection.channel());
    } catch (cause) {
      this.#drop();
      throw unavailable('RabbitMQ did not answer', cause);
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    const connection = await this.#connection?.catch(() => null);
    this.#connection = null;
    if (connection) await closeConnection(connection);
  }

  #connect(): Promise<AMQPBaseClient> {
    if (this.#closed)
      return Promise.reject(new BrokerError('broker_closed', 'permanent', 'broker offsets reader is closed'));
    this.#connection ??= connectRabbit(this.#options.url).catch((cause: unknown) => {
      this.#connection = null;
      throw unavailable('cannot reach RabbitMQ', cause);
    });
    return this.#connection;
  }

  /** A connection that failed a call is dropped: the next call connects again. */
  #drop(): void {
    const old = this.#connection;
    this.#connection = null;
    void old?.then(closeConnection).catch(() => {});
  }
}

function unavailable(what: string, cause: unknown): BrokerError {
  return new BrokerError('broker_unavailable', 'transient', `${what}: ${(cause as Error).message}`, { cause });
}
