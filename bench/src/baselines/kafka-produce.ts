import { newEventId } from '@postbox/engine';
import { createKafka } from '@postbox/engine/kafka';
import { Partitioners } from 'kafkajs';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchTopic, deleteTopics, kafka, perSecond, progressBar } from '../support.ts';
import { benchData } from '../workload/fill.ts';

/**
 * Raw kafkajs produce: one idempotent producer (acks = all), the same keyed records the relay sends (same value
 * bytes, CloudEvents headers), sequential sends of 100 and of 500 records. Bounds the relay's publishing.
 */
export async function kafkaProduceBaseline({ options, report }: Bench): Promise<void> {
  const byBatch: Record<string, number> = {};
  for (const batch of [100, 500])
    byBatch[batch] = await produce(options.events, options.payload, options.partitions, batch);
  const best = Math.max(...Object.values(byBatch));
  report.results.baselines.kafkaProduce = {
    eventsPerSecond: best,
    byBatch,
    events: options.events,
    acks: -1,
    idempotent: true,
  };
  report.row(
    'baseline',
    'raw kafkajs produce (acks=all, idempotent)',
    rate(best),
    [],
    `batch 100: ${rate(byBatch[100]!)}, batch 500: ${rate(byBatch[500]!)}`,
  );
}

async function produce(events: number, payload: number, partitions: number, batch: number): Promise<number> {
  const topic = await benchTopic('produce', partitions);
  const producer = createKafka(kafka).producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
  });
  const value = benchData(payload);
  const aggregates = Math.max(1, Math.floor(events / 10));
  const bar = progressBar(`raw kafkajs produce, batch ${batch}`, events);
  try {
    await producer.connect();
    const started = performance.now();
    for (let sent = 0; sent < events; sent += batch) {
      const n = Math.min(batch, events - sent);
      const messages = Array.from({ length: n }, (_, i) => {
        const key = `a-${(sent + i) % aggregates}`;
        return {
          key,
          value,
          headers: {
            ce_specversion: '1.0',
            ce_id: newEventId(),
            ce_type: 'OrderPlaced',
            ce_source: 'bench',
            ce_subject: key,
            ce_time: new Date().toISOString(),
            ce_aggregateversion: '1',
            ce_schemaversion: '1',
            'content-type': 'application/json',
          },
        };
      });
      await producer.send({ topic, acks: -1, messages });
      bar(sent + n);
    }
    return perSecond(events, (performance.now() - started) / 1000);
  } catch (cause) {
    throw new Error(`bench: raw kafkajs produce to ${topic} failed`, { cause });
  } finally {
    await producer.disconnect().catch(() => {});
    await deleteTopics([topic]);
  }
}
