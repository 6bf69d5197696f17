import { AMQPClient, type AMQPBaseClient } from '@cloudamqp/amqp-client';
import { partitionForKey } from '@postbox/engine/nats';
import { queueName, RABBIT_KEY_HEADER, toAmqpHeaders } from '@postbox/engine/rabbitmq';
import { brokerTopic, rabbitmq } from '../brokers.ts';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { perSecond, progressBar, until } from '../support.ts';
import { benchData } from '../workload/fill.ts';
import { publishInFlight } from '../workload/raw-publish.ts';

const GROUP = 'raw';
/** What the RabbitMQ subscriber acknowledges at a time, about: one multiple-ack per this many deliveries. */
const ACK_EVERY = 100;
const PREFETCH = 256;

/**
 * Raw RabbitMQ with @cloudamqp/amqp-client, no Postbox: (1) publishing the relay's messages (same value bytes,
 * the CloudEvents AMQP headers, message id) to the topic's direct exchange, routed by partition, persistent,
 * mandatory, with publisher confirms, `batch` in flight on one channel; then (2) consuming them from the
 * group's quorum queues (one per partition, a channel each, prefetch 256, a multiple-ack every 100), timed from
 * the first delivery to the last. Bound the relay's publishing to RabbitMQ and the consumer's reading.
 * Runs only with `--broker` naming rabbitmq.
 */
export async function rabbitmqRawBaseline({ options, report }: Bench): Promise<void> {
  if (!options.brokers.includes('rabbitmq')) return;
  const target = await brokerTopic('rabbitmq', 'rabbitraw', options.partitions, [GROUP]);
  const client = await new AMQPClient(rabbitmq.url).connect();
  try {
    const publish = await timedPublish(client, target.topic, options);
    report.results.baselines.rabbitmqPublish = {
      eventsPerSecond: publish,
      events: options.events,
      inFlight: options.batch,
    };
    report.row(
      'baseline',
      'raw RabbitMQ publish (confirms, persistent, quorum queues)',
      rate(publish),
      [],
      `${options.batch} in flight`,
    );
    const consume = await timedConsume(client, target.topic, options);
    report.results.baselines.rabbitmqConsume = { eventsPerSecond: consume.perSecond, events: options.events };
    report.row(
      'baseline',
      'raw RabbitMQ consume (prefetch, multiple-ack, no work)',
      rate(consume.perSecond),
      [],
      'first delivery to last',
    );
  } finally {
    await client.close().catch(() => {});
    await target.drop();
  }
}

async function timedPublish(client: AMQPBaseClient, topic: string, options: Bench['options']): Promise<number> {
  const ch = await client.channel();
  await ch.confirmSelect();
  const value = benchData(options.payload);
  const eventsPerSecond = await publishInFlight(options, 'raw RabbitMQ publish', (key, id, neutral) => {
    const { headers, contentType } = toAmqpHeaders({ ...neutral, [RABBIT_KEY_HEADER]: key });
    return ch.basicPublish(
      topic,
      String(partitionForKey(key, options.partitions)),
      value,
      { deliveryMode: 2, messageId: id, headers, ...(contentType ? { contentType } : {}) },
      true,
    );
  });
  await ch.close();
  return eventsPerSecond;
}

async function timedConsume(
  client: AMQPBaseClient,
  topic: string,
  options: Bench['options'],
): Promise<{ perSecond: number }> {
  const bar = progressBar('raw RabbitMQ consume', options.events);
  let seen = 0;
  let first = 0;
  let last = 0;
  const channels = [];
  for (let p = 0; p < options.partitions; p++) {
    const ch = await client.channel();
    await ch.basicQos(PREFETCH);
    let sinceAck = 0;
    await ch.basicConsume(queueName(topic, GROUP, p), { noAck: false }, (m) => {
      if (seen === 0) first = performance.now();
      seen++;
      last = performance.now();
      if (++sinceAck >= ACK_EVERY) {
        sinceAck = 0;
        void m.ack(true);
      }
      bar(Math.min(seen, options.events));
    });
    channels.push(ch);
  }
  await until(() => seen >= options.events, `raw RabbitMQ consume of ${options.events} (has ${seen})`, 300_000);
  for (const ch of channels) await ch.close().catch(() => {});
  return { perSecond: perSecond(options.events, (last - first) / 1000) };
}
