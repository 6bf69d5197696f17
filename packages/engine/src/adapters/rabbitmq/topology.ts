import type { AMQPBaseClient, AMQPChannel } from '@cloudamqp/amqp-client';
import { connectRabbit } from './connection.ts';
import { ConfigError } from '../../errors.ts';
import { classifyRabbitError } from './classify.ts';

/** A topic as Postbox configures it (POSTBOX_TOPICS): the same shape as Kafka's TopicSpec. */
export interface RabbitTopicSpec {
  topic: string;
  /** @defaultValue 12 */
  partitions?: number;
}

/**
 * RabbitMQ's shape of a topic (docs/brokers.md): a durable direct exchange named for the topic (the partition
 * count is POSTBOX_TOPICS': RabbitMQ does not compare an exchange's arguments, so it cannot hold it); and, for
 * each consumer group, one quorum queue per partition, `<topic>:<group>:<p>`, bound with
 * routing key `<p>`, single-active-consumer, so a partition's messages reach one consumer, in order. A message
 * published while no queue is bound for its partition reaches nobody (RabbitMQ keeps no log): the publisher
 * reports it as failed for good, never as confirmed.
 */
export function queueName(topic: string, group: string, partition: number): string {
  return `${topic}:${group}:${partition}`;
}

// Queue and exchange names: up to 255 bytes of anything, but the names here are also routing material. No `:` in
// a topic or group, so that a queue name says which topic and group it is (with `.`, topic `a.b` of group `c` and
// topic `a` of group `b.c` would share one queue).
const NAME = /^[A-Za-z0-9_.-]+$/;

/**
 * Declares the exchange of every topic, and the queues of `groups` on each, when missing (declarations are
 * idempotent); an exchange or queue there with another shape is refused by name. Returns each topic's partition
 * count.
 */
export async function ensureExchanges(
  connection: { url: string },
  specs: RabbitTopicSpec[],
  groups: string[] = [],
): Promise<Map<string, number>> {
  for (const name of [...specs.map((s) => s.topic), ...groups])
    if (!NAME.test(name))
      throw new ConfigError(`"${name}" cannot name a RabbitMQ exchange or queue here: use letters, digits, _, - and .`);
  const client = await connectRabbit(connection.url).catch((cause: unknown) => {
    throw classifyRabbitError(cause);
  });
  try {
    const counts = new Map<string, number>();
    for (const spec of specs) {
      const partitions = spec.partitions ?? 12;
      await ensureExchange(client, spec.topic);
      for (const group of groups) await ensureGroupQueues(await client.channel(), spec.topic, partitions, group);
      counts.set(spec.topic, partitions);
    }
    return counts;
  } catch (cause) {
    throw cause instanceof ConfigError ? cause : classifyRabbitError(cause);
  } finally {
    await client.close().catch(() => {});
  }
}

/**
 * Declares the topic's exchange. A user without configure permission on it (a consumer's: configure would let it
 * delete the exchange) has its declare refused, and checks the exchange is there with a passive declare on a
 * fresh channel instead (the refusal closed the first); its shape is then the declaring relay's to have checked.
 */
async function ensureExchange(client: AMQPBaseClient, topic: string): Promise<void> {
  const ch = await client.channel();
  try {
    await ch.exchangeDeclare(topic, 'direct', { durable: true });
  } catch (cause) {
    if (/ACCESS_REFUSED/.test((cause as Error).message)) return checkExchange(await client.channel(), topic);
    if (!/PRECONDITION_FAILED|inequivalent/i.test((cause as Error).message)) throw cause;
    throw new ConfigError(
      `RabbitMQ exchange ${topic} exists with another shape than a durable direct exchange (${(cause as Error).message}): delete it, Postbox will not`,
      { cause },
    );
  } finally {
    if (!ch.closed) await ch.close().catch(() => {});
  }
}

async function checkExchange(ch: AMQPChannel, topic: string): Promise<void> {
  try {
    await ch.exchangeDeclare(topic, 'direct', { passive: true });
  } finally {
    if (!ch.closed) await ch.close().catch(() => {});
  }
}

/** One quorum queue per partition for the group, single-active-consumer, bound to the topic's exchange. */
export async function ensureGroupQueues(
  ch: AMQPChannel,
  topic: string,
  partitions: number,
  group: string,
): Promise<void> {
  try {
    for (let p = 0; p < partitions; p++) {
      const queue = queueName(topic, group, p);
      await ch
        .queueDeclare(queue, { durable: true }, { 'x-queue-type': 'quorum', 'x-single-active-consumer': true })
        .catch((cause: unknown) => {
          if (!/PRECONDITION_FAILED|inequivalent/i.test((cause as Error).message)) throw cause;
          throw new ConfigError(
            `RabbitMQ queue ${queue} exists with another shape than a durable quorum queue with single-active-consumer (${(cause as Error).message}): delete it, Postbox will not`,
            { cause },
          );
        });
      await ch.queueBind(queue, topic, String(p));
    }
  } finally {
    if (!ch.closed) await ch.close().catch(() => {});
  }
}
