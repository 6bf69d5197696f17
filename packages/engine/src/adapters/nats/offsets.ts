import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { BrokerError } from '../../errors.ts';
import type { BrokerOffsets, PartitionPosition, TopicRetention } from '../../ports/offsets.ts';
import { connectNats, type NatsConnectionOptions } from './client.ts';
import { partitionPositions } from './positions.ts';
import { partitionStreams } from './streams.ts';

/** BrokerOffsets over JetStream's stream and consumer info, connected on first use. Positions are stream sequences. */
export class NatsOffsets implements BrokerOffsets {
  readonly #options: NatsConnectionOptions;
  #client: Promise<{ nc: NatsConnection; jsm: JetStreamManager }> | null = null;
  #closed = false;

  constructor(options: NatsConnectionOptions) {
    this.#options = options;
  }

  async positions(groupId: string | null, topics: string[]): Promise<PartitionPosition[]> {
    const { jsm } = await this.#connect();
    try {
      const positions = await partitionPositions(jsm, groupId, topics);
      return positions.map(({ unacknowledged: _, ...p }) => p);
    } catch (cause) {
      throw new BrokerError(
        'broker_unavailable',
        'transient',
        `reading NATS positions failed: ${(cause as Error).message}`,
        {
          cause,
        },
      );
    }
  }

  /** Each topic's streams' max_age (the longest of its partitions); 0 is no limit: forever (null). */
  async retention(topics: string[]): Promise<TopicRetention[]> {
    const { jsm } = await this.#connect();
    try {
      const out: TopicRetention[] = [];
      for (const topic of topics) {
        let longest: number | null = 0;
        for (const { name } of await partitionStreams(jsm, topic)) {
          const ageNs = (await jsm.streams.info(name)).config.max_age;
          longest = ageNs === 0 || longest === null ? null : Math.max(longest, Math.ceil(ageNs / 1e6));
        }
        out.push({ topic, retentionMs: longest, source: `JetStream max_age of its ${topic}.* streams` });
      }
      return out;
    } catch (cause) {
      throw new BrokerError(
        'broker_unavailable',
        'transient',
        `reading NATS stream retention failed: ${(cause as Error).message}`,
        { cause },
      );
    }
  }

  async ping(): Promise<void> {
    const { jsm } = await this.#connect();
    try {
      await jsm.getAccountInfo();
    } catch (cause) {
      throw new BrokerError('broker_unavailable', 'transient', `NATS did not answer: ${(cause as Error).message}`, {
        cause,
      });
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    const client = await this.#client?.catch(() => null);
    this.#client = null;
    await client?.nc.close().catch(() => {});
  }

  #connect(): Promise<{ nc: NatsConnection; jsm: JetStreamManager }> {
    if (this.#closed)
      return Promise.reject(new BrokerError('broker_closed', 'permanent', 'broker offsets reader is closed'));
    this.#client ??= (async () => {
      const nc = await connectNats({ ...this.#options, name: this.#options.name ?? 'postbox-control' });
      return { nc, jsm: await jetstreamManager(nc) };
    })().catch((cause: unknown) => {
      this.#client = null;
      throw new BrokerError('broker_unavailable', 'transient', `cannot reach NATS: ${(cause as Error).message}`, {
        cause,
      });
    });
    return this.#client;
  }
}
