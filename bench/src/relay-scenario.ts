import { inlineExecutor, KafkaPublisher, Relay, resolveRelayOptions } from '@postbox/engine';
import { createPublishPool } from '@postbox/workers';
import { benchDatabase, createTopic, fillOutbox, progressBar, stack } from './support.ts';

export interface RelayRun {
  events: number;
  threads: number;
  batchSize: number;
  eventsPerSecond: number;
  seconds: number;
}

/** A pre-filled outbox of N rows drained to Kafka by one relay with T pool threads (0 = main thread). */
export async function relayScenario(o: { events: number; payload: number; partitions: number; threads: number; batchSize: number }): Promise<RelayRun> {
  const db = await benchDatabase();
  const topic = `bench.relay.${Date.now()}`;
  try {
    await createTopic(topic, o.partitions);
    await fillOutbox(db.sql, topic, o.events, o.payload, progressBar(`fill outbox`, o.events));
    await db.sql`VACUUM ANALYZE message_outbox`;
    const options = resolveRelayOptions({ batchSize: o.batchSize, maxInFlight: Math.max(2, o.threads * 2), pollMs: 100 });
    const kafka = { brokers: stack.KAFKA_BROKERS.split(',') };
    const executor =
      o.threads === 0
        ? inlineExecutor({ sql: db.sql, publisher: new KafkaPublisher(kafka), options })
        : createPublishPool({ databaseUrl: db.url, kafka, relay: options, threads: o.threads });
    const relay = new Relay({ sql: db.sql, executor, options });
    const bar = progressBar(`relay (${o.threads} threads)`, o.events);
    const started = performance.now();
    await relay.start();
    for (;;) {
      const [row] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_outbox WHERE status = 'published'`;
      bar(row!.n);
      if (row!.n >= o.events) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const seconds = (performance.now() - started) / 1000;
    await relay.stop();
    return { events: o.events, threads: o.threads, batchSize: o.batchSize, seconds, eventsPerSecond: o.events / seconds };
  } finally {
    await db.drop();
  }
}
