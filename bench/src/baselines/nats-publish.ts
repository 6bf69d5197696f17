import { jetstream } from '@nats-io/jetstream';
import { newEventId } from '@postbox/engine';
import { connectNats, partitionForKey, subjectOf, toNatsHeaders } from '@postbox/engine/nats';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { nats, natsBenchTopic, perSecond, progressBar } from '../support.ts';
import { benchData } from '../workload/fill.ts';

/**
 * Raw JetStream publishing (nats.js, no Postbox): the same keyed messages the relay sends (same value bytes,
 * the CloudEvents NATS headers, Nats-Msg-Id) to the same stream per partition, `batch` publishes in flight at a
 * time, each awaited for its PubAck. Bounds the relay's publishing to NATS. Runs only with `--broker` naming nats.
 */
export async function natsPublishBaseline({ options, report }: Bench): Promise<void> {
  if (!options.brokers.includes('nats')) return;
  const target = await natsBenchTopic('natspub', options.partitions);
  const nc = await connectNats(nats);
  try {
    const js = jetstream(nc);
    const value = benchData(options.payload);
    const aggregates = Math.max(1, Math.floor(options.events / 10));
    const bar = progressBar(`raw JetStream publish, ${options.batch} in flight`, options.events);
    const started = performance.now();
    for (let sent = 0; sent < options.events; sent += options.batch) {
      const n = Math.min(options.batch, options.events - sent);
      await Promise.all(
        Array.from({ length: n }, (_, i) => {
          const key = `a-${(sent + i) % aggregates}`;
          const id = newEventId();
          const headers = toNatsHeaders({
            specversion: '1.0',
            id,
            type: 'OrderPlaced',
            source: 'bench',
            subject: key,
            time: new Date().toISOString(),
            aggregateversion: '1',
            schemaversion: '1',
            datacontenttype: 'application/json',
          });
          return js.publish(subjectOf(target.topic, partitionForKey(key, options.partitions)), value, {
            msgID: id,
            headers,
          });
        }),
      );
      bar(sent + n);
    }
    const eventsPerSecond = perSecond(options.events, (performance.now() - started) / 1000);
    report.results.baselines.natsPublish = { eventsPerSecond, events: options.events, inFlight: options.batch };
    report.row(
      'baseline',
      'raw JetStream publish (PubAck each, file storage)',
      rate(eventsPerSecond),
      [],
      `${options.batch} in flight`,
    );
  } finally {
    await nc.close();
    await target.drop();
  }
}
