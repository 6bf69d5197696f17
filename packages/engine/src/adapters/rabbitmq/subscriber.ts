import type { AMQPBaseClient } from '@cloudamqp/amqp-client';
import { BrokerError, ConfigError } from '../../errors.ts';
import type { PartitionAssignment } from '../../ports/partition-assignment.ts';
import type { PartitionLag, Subscriber, SubscriberSink, TopicPartition } from '../../ports/subscriber.ts';
import { LeasedReaders } from '../leased-readers.ts';
import { classifyRabbitError } from './classify.ts';
import { closeConnection, connectRabbit } from './connection.ts';
import { queueDepths } from './queue-depths.ts';
import { QueueReader } from './queue-reader.ts';
import { ensureGroupQueues, queueName } from './topology.ts';

export interface RabbitSubscriberOptions {
  /** amqp://user:pass@host:port/vhost */
  url: string;
  groupId: string;
  topics: string[];
  /** Partitions per topic (POSTBOX_TOPICS'): the group's queues are declared for them at start. */
  partitions: ReadonlyMap<string, number>;
  /** Who reads which partition (PostgreSQL leases): single-active-consumer is per queue only. */
  assignment: PartitionAssignment;
  /** Deliveries unacknowledged at most per partition (basic.qos). @defaultValue 256 */
  prefetch?: number;
  /**
   * The broker's consumer_timeout: a delivery unacknowledged this long closes its channel. A partition whose oldest
   * delivery has been held for 80 % of it is given back to the queue and read again. @defaultValue 1800000,
   * RabbitMQ's default
   */
  consumerTimeoutMs?: number;
  /** Told of a channel lost, a partition that could not be opened, a delivery held too long (each read again). */
  onError?: (error: Error, partition: TopicPartition) => void;
}

/** How often held partitions without a reader are opened again and held deliveries checked against the timeout. */
const TICK_MS = 2000;
const key = (p: TopicPartition) => `${p.topic}:${p.partition}`;

/**
 * Subscriber over RabbitMQ (docs/brokers.md). A consumer group reads each partition of a topic from its own
 * quorum queue (`<topic>:<group>:<p>`, declared at start), on a channel of its own (queue-reader.ts): prefetch
 * bounds what is in flight, and a commit is one multiple-ack of every delivery below the committed offset — the
 * watermark commit. Offsets are this subscriber's count of deliveries per partition (queues have no positions):
 * increasing, and new for a message delivered again. Which member reads which partition comes from `assignment`
 * (PostgreSQL leases); the queues' single-active-consumer is the fence behind it: a member taking a partition
 * over before the previous one has closed its channel waits as the standby consumer, and gets the queue, with
 * whatever was not acknowledged first, in order, when it does.
 */
export class RabbitSubscriber implements Subscriber {
  readonly #options: RabbitSubscriberOptions;
  readonly #readers: LeasedReaders<QueueReader>;
  /** Next offset per partition: kept across channels, so a delivery never gets an offset already given. */
  readonly #offsets = new Map<string, bigint>();
  #connection: Promise<AMQPBaseClient> | null = null;
  #sink: SubscriberSink | null = null;
  #timer: NodeJS.Timeout | null = null;
  #closed: Promise<void> | null = null;

  constructor(options: RabbitSubscriberOptions) {
    this.#options = options;
    this.#readers = new LeasedReaders({
      open: (p, paused) => this.#read(p, paused),
      onAssignment: (held) => this.#sink?.onAssignment(held),
      onError: (cause, p) => this.#report(classifyRabbitError(cause), p),
    });
  }

  async start(sink: SubscriberSink): Promise<void> {
    if (this.#sink) throw new Error('subscriber already started');
    const partitions = this.#partitions();
    this.#sink = sink;
    try {
      const connection = await this.#connected();
      for (const topic of this.#options.topics)
        await ensureGroupQueues(
          await connection.channel(),
          topic,
          this.#options.partitions.get(topic)!,
          this.#options.groupId,
        );
      await this.#options.assignment.join(partitions, (held) =>
        this.#closed ? Promise.resolve() : this.#readers.assign(held),
      );
    } catch (cause) {
      throw cause instanceof BrokerError || cause instanceof ConfigError ? cause : classifyRabbitError(cause);
    }
    // Closed while starting: no timer, or the process would never exit.
    if (!this.#closed) this.#timer = setInterval(() => this.#tick(), TICK_MS);
  }

  /** Every partition of the topics, from the configured counts (an exchange cannot hold one). */
  #partitions(): TopicPartition[] {
    return this.#options.topics.flatMap((topic) => {
      const count = this.#options.partitions.get(topic);
      if (count === undefined)
        throw new ConfigError(
          `RabbitMQ subscriber of group ${this.#options.groupId}: topic ${topic} has no partition count (add it to POSTBOX_TOPICS)`,
        );
      return Array.from({ length: count }, (_, partition) => ({ topic, partition }));
    });
  }

  /** The connection, opened again when the broker closed it. */
  async #connected(): Promise<AMQPBaseClient> {
    if (this.#closed) throw new BrokerError('subscriber_closed', 'transient', 'the RabbitMQ subscriber is closed');
    const current = this.#connection;
    if (current) {
      const connection = await current.catch(() => null);
      if (connection && !connection.closed) return connection;
      if (this.#connection === current) this.#connection = null;
    }
    this.#connection ??= connectRabbit(this.#options.url);
    return this.#connection;
  }

  async #read(p: TopicPartition, paused: boolean): Promise<QueueReader> {
    const channel = await (await this.#connected()).channel();
    const k = key(p);
    const reader = await QueueReader.open(channel, {
      topic: p.topic,
      partition: p.partition,
      queue: queueName(p.topic, this.#options.groupId, p.partition),
      prefetch: this.#options.prefetch ?? 256,
      paused,
      nextOffset: () => {
        const next = this.#offsets.get(k) ?? 0n;
        this.#offsets.set(k, next + 1n);
        return next;
      },
      offer: (records) => this.#sink!.onRecords(records),
    });
    void reader.ended.then(async (reason) => {
      if (reason === null) return;
      this.#report(classifyRabbitError(reason), p);
      // Cancelled by the broker (the queue deleted), its channel may still be open, holding deliveries: closed.
      await reader.stop();
      this.#readers.ended(p, reader);
    });
    return reader;
  }

  /**
   * Opens held partitions without a reader (the connection lost, the broker away); gives back the deliveries of a
   * partition held near the consumer timeout, before the broker closes the channel with an error.
   */
  #tick(): void {
    const limit = (this.#options.consumerTimeoutMs ?? 1_800_000) * 0.8;
    for (const reader of this.#readers.all()) {
      const p = reader.partition;
      if (reader.dead) {
        this.#report(
          new BrokerError(
            'rabbitmq_closed',
            'transient',
            `the channel of ${p.topic}:${p.partition} is gone: read again`,
          ),
          p,
        );
        this.#readers.ended(p, reader);
        continue;
      }
      if (reader.heldForMs() < limit) continue;
      this.#report(
        new BrokerError(
          'rabbitmq_held_too_long',
          'transient',
          `a delivery of ${p.topic}:${p.partition} has been unacknowledged for ${reader.heldForMs()} ms, near the broker's consumer timeout: given back to the queue and read again`,
        ),
        p,
      );
      void reader.stop().then(() => this.#readers.ended(p, reader));
    }
    this.#readers.readMissing();
  }

  #report(error: Error, p: TopicPartition): void {
    this.#options.onError?.(error, p);
  }

  async commit(offsets: Array<TopicPartition & { offset: string }>): Promise<void> {
    try {
      await Promise.all(offsets.map((o) => this.#readers.get(o)?.commit(BigInt(o.offset)) ?? Promise.resolve()));
    } catch (cause) {
      throw classifyRabbitError(cause);
    }
  }

  pause(partitions: TopicPartition[]): void {
    this.#readers.pause(partitions);
  }

  resume(partitions: TopicPartition[]): void {
    this.#readers.resume(partitions);
  }

  /**
   * Per partition of the topics: lag = the queue's ready messages plus the deliveries this member holds
   * unacknowledged. Offsets are this member's count: committed = the last offset committed (null before one),
   * high = the next offset plus the ready messages. A partition another member reads shows its ready messages
   * only (what that member holds is not visible here).
   */
  async lag(): Promise<PartitionLag[]> {
    if (this.#closed || !this.#sink) return [];
    const partitions = this.#partitions();
    const depths = await queueDepths(
      await this.#connected(),
      partitions.map((p) => queueName(p.topic, this.#options.groupId, p.partition)),
    );
    return partitions.map((p, i) => {
      const ready = depths[i] ?? 0;
      const reader = this.#readers.get(p);
      if (!reader) return { ...p, committed: null, high: String(ready), lag: ready };
      const { unacked, committed } = reader.progress();
      const next = this.#offsets.get(key(p)) ?? 0n;
      return {
        ...p,
        committed: committed === null ? null : committed.toString(),
        high: (next + BigInt(ready)).toString(),
        lag: unacked + ready,
      };
    });
  }

  close(): Promise<void> {
    this.#closed ??= (async () => {
      if (this.#timer) clearInterval(this.#timer);
      await this.#readers.close();
      if (this.#sink) await this.#options.assignment.leave().catch(() => {});
      const connection = await this.#connection?.catch(() => null);
      if (connection) await closeConnection(connection);
    })();
    return this.#closed;
  }
}
