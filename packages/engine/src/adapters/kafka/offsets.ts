import kafkajs, { type Admin } from 'kafkajs';
import { BrokerError } from '../../errors.ts';
import type { BrokerHealthReport } from '../../ports/broker-health.ts';
import type { BrokerOffsets, PartitionPosition, TopicRetention } from '../../ports/offsets.ts';
import { KafkaHealthProbe } from './broker-health.ts';
import { createKafka, type KafkaConnection } from './client.ts';

/** BrokerOffsets over the kafkajs admin client, connected on first use and again after a failure. */
// kafkajs's enums are properties of its CommonJS export, not named exports Node can link.
const TOPIC_RESOURCE = kafkajs.ConfigResourceTypes.TOPIC;

export class KafkaOffsets implements BrokerOffsets {
  readonly #admin: Admin;
  readonly #health: KafkaHealthProbe;
  #connected: Promise<void> | null = null;
  #closed = false;

  constructor(connection: KafkaConnection) {
    this.#admin = createKafka({ ...connection, clientId: `${connection.clientId ?? 'postbox'}-control` }).admin();
    this.#health = new KafkaHealthProbe(this.#admin, connection);
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

  /**
   * Effective retention per topic from its configuration: a record lives until its segment is deleted, which
   * happens once the segment's newest record is older than retention.ms — and a segment stays open up to
   * segment.ms, so retention.ms + segment.ms bounds a record's life. retention.ms -1, or a compacted topic, keeps
   * records forever (null).
   */
  async retention(topics: string[]): Promise<TopicRetention[]> {
    if (topics.length === 0) return [];
    await this.#connect();
    try {
      const { resources } = await this.#admin.describeConfigs({
        includeSynonyms: false,
        resources: topics.map((name) => ({
          type: TOPIC_RESOURCE,
          name,
          configNames: ['retention.ms', 'segment.ms', 'cleanup.policy'],
        })),
      });
      return resources.map((r) => {
        if (r.errorCode !== 0) throw new Error(`topic ${r.resourceName}: ${r.errorMessage || `error ${r.errorCode}`}`);
        const value = (name: string) => r.configEntries.find((e) => e.configName === name)?.configValue ?? '';
        const retentionMs = Number(value('retention.ms'));
        const segmentMs = Number(value('segment.ms'));
        const policy = value('cleanup.policy');
        if (policy.includes('compact') || retentionMs < 0)
          return {
            topic: r.resourceName,
            retentionMs: null,
            source: `cleanup.policy=${policy}, retention.ms=${retentionMs}`,
          };
        return {
          topic: r.resourceName,
          retentionMs: retentionMs + segmentMs,
          source: `retention.ms ${retentionMs} + segment.ms ${segmentMs}`,
        };
      });
    } catch (cause) {
      throw new BrokerError(
        'broker_unavailable',
        'transient',
        `reading the retention of ${topics.join(', ')} failed: ${(cause as Error).message}`,
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

  /** Replica health through this admin (broker-health.ts); a failed probe is reported, never thrown. */
  health(topics: string[]): Promise<BrokerHealthReport> {
    return this.#health.probe(() => this.#connect(), topics);
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
