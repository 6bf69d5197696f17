import { Partitioners } from 'kafkajs';
import { createTopic, kafkaClient, progressBar } from './support.ts';

/** Raw kafkajs: one idempotent producer, acks = all, keyed 1 KiB-ish records in sequential batches. */
export async function produceBaseline(o: { events: number; payload: number; partitions: number; batch: number }): Promise<{ eventsPerSecond: number; batch: number }> {
  const topic = `bench.produce.${Date.now()}`;
  await createTopic(topic, o.partitions);
  const producer = kafkaClient().producer({ idempotent: true, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const value = Buffer.from(JSON.stringify({ pad: 'x'.repeat(Math.max(0, o.payload - 12)) }));
  const headers = { ce_id: '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', ce_type: 'BenchEvent', ce_source: 'bench', ce_specversion: '1.0' };
  const bar = progressBar(`raw kafkajs (batch ${o.batch})`, o.events);
  const started = performance.now();
  for (let sent = 0; sent < o.events; sent += o.batch) {
    const n = Math.min(o.batch, o.events - sent);
    await producer.send({ topic, acks: -1, messages: Array.from({ length: n }, (_, i) => ({ key: `a-${(sent + i) % 10_000}`, value, headers })) });
    bar(sent + n);
  }
  const seconds = (performance.now() - started) / 1000;
  await producer.disconnect();
  return { eventsPerSecond: o.events / seconds, batch: o.batch };
}
