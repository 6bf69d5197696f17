import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectNats, partitionForKey, streamName, subjectOf, toNatsHeaders } from '@postbox/engine/nats';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { nats, natsBenchTopic, perSecond, progressBar } from '../support.ts';
import { benchData } from '../workload/fill.ts';
import { publishInFlight } from '../workload/raw-publish.ts';

/** One AckAll acknowledgement per this many messages, about what the NATS subscriber does. */
const ACK_EVERY = 100;
const PULL = 256;

/**
 * Raw JetStream (nats.js, no Postbox): (1) publishing the same keyed messages the relay sends (same value bytes,
 * the CloudEvents NATS headers, Nats-Msg-Id) to the same stream per partition, `batch` publishes in flight at a
 * time, each awaited for its PubAck; then (2) reading them back through one durable pull consumer per partition
 * stream (AckAll, an ack every 100), timed from the first message to the last. Bound the relay's publishing to
 * NATS and the consumer's reading. Runs only with `--broker` naming nats.
 */
export async function natsRawBaseline({ options, report }: Bench): Promise<void> {
  if (!options.brokers.includes('nats')) return;
  const target = await natsBenchTopic('natspub', options.partitions);
  const nc = await connectNats(nats);
  try {
    const js = jetstream(nc);
    const value = benchData(options.payload);
    const eventsPerSecond = await publishInFlight(options, 'raw JetStream publish', (key, id, headers) =>
      js.publish(subjectOf(target.topic, partitionForKey(key, options.partitions)), value, {
        msgID: id,
        headers: toNatsHeaders(headers),
      }),
    );
    report.results.baselines.natsPublish = { eventsPerSecond, events: options.events, inFlight: options.batch };
    report.row(
      'baseline',
      'raw JetStream publish (PubAck each, file storage)',
      rate(eventsPerSecond),
      [],
      `${options.batch} in flight`,
    );
    const consume = await timedConsume(nc, target.topic, options);
    report.results.baselines.natsConsume = { eventsPerSecond: consume, events: options.events };
    report.row(
      'baseline',
      'raw JetStream consume (durable pull, AckAll, no work)',
      rate(consume),
      [],
      'first message to last',
    );
  } finally {
    await nc.close();
    await target.drop();
  }
}

async function timedConsume(nc: NatsConnection, topic: string, options: Bench['options']): Promise<number> {
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const bar = progressBar('raw JetStream consume', options.events);
  let seen = 0;
  let first = 0;
  let last = 0;
  const readers = Array.from({ length: options.partitions }, async (_, p) => {
    const stream = streamName(topic, p);
    const { num_pending } = await jsm.consumers.add(stream, { durable_name: 'raw', ack_policy: AckPolicy.All });
    if (num_pending === 0) return;
    const consumer = await js.consumers.get(stream, 'raw');
    const messages = await consumer.consume({ max_messages: PULL });
    let read = 0;
    for await (const m of messages) {
      if (seen === 0) first = performance.now();
      seen++;
      last = performance.now();
      bar(Math.min(seen, options.events));
      if (++read % ACK_EVERY === 0 || read === num_pending) m.ack();
      if (read === num_pending) break;
    }
    await messages.close();
  });
  await Promise.all(readers);
  return perSecond(options.events, (last - first) / 1000);
}
