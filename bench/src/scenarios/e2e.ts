import { createWaker, defaultConsumerLimits } from '@postbox/engine';
import type { Bench } from '../context.ts';
import { rate, ratio } from '../report.ts';
import { benchDatabase, benchTopic, deleteTopics, perSecond, progressBar } from '../support.ts';
import { engineOrderWriter, placeOrders } from '../workload/business.ts';
import { describeCpu, startCpuMeter } from '../workload/cpu.ts';
import { startRoles, untilCommitted } from '../workload/roles.ts';

/**
 * Everything at once: a live producer in the bench process (order row + outbox row through transaction() +
 * enqueue(), one transaction per event, at the concurrency where the raw producer peaked) → a `postbox relay`
 * process → Kafka → a `postbox consume` process (inbox + projection) → committed. Events/s from the first producer
 * commit to the last consumer commit, read from the database clock (outbox created_at → projection updated_at);
 * the consumer's lag when the producer stops, in events and in seconds of production.
 */
export async function e2eScenario({ options, report }: Bench): Promise<void> {
  const concurrency = (report.results.baselines.producer?.bestConnections as number | undefined) ?? 32;
  const relayThreads = report.relayThreads();
  const events = options.pipelineEvents;
  const db = await benchDatabase(concurrency);
  const topic = await benchTopic('e2e', options.partitions);
  const roles = await startRoles(db, {
    topic,
    partitions: options.partitions,
    relayThreads,
    consumerThreads: defaultConsumerLimits.threads,
    batch: options.batch,
    label: 'e2e',
  });
  try {
    const waker = createWaker(db.sql);
    await engineOrderWriter(db.sql, waker, { topic, payload: options.payload, prefix: 'warm' }).place(0);
    await untilCommitted(roles, 1, 60_000);
    const writer = engineOrderWriter(db.sql, waker, { topic, payload: options.payload, prefix: 'e2e' });
    const bar = progressBar(`e2e (${concurrency} producers)`, events);
    const started = performance.now();
    const cpu = startCpuMeter({ relay: roles.relay.pid, consumer: roles.consumer.pid, producer: true });
    await placeOrders(writer, events, concurrency, (n) => n % 500 === 0 && bar(n));
    const produced = performance.now();
    const lagEvents = events - ((await roles.committed()) - 1);
    await untilCommitted(roles, events + 1, 600_000, (n) => bar(Math.max(0, n - 1)));
    const finished = performance.now();
    const cpuPerEvent = cpu.perEvent(events);
    const [clock] = await db.sql<{ seconds: number }[]>`
      SELECT extract(epoch FROM max(p.updated_at) - min(o.created_at))::float8 AS seconds
      FROM message_outbox o JOIN demo_order_projection p ON p.order_id = o.aggregate_id
      WHERE o.aggregate_id LIKE 'e2e-%'`;
    const seconds = clock!.seconds;
    const eventsPerSecond = perSecond(events, seconds);
    const producerRate = perSecond(events, (produced - started) / 1000);
    const best = report.baseline('producer');
    report.results.scenarios.e2e = {
      eventsPerSecond,
      ratioToProducer: ratio(eventsPerSecond, best),
      seconds,
      events,
      producerConcurrency: concurrency,
      producerEventsPerSecond: producerRate,
      lagAtProducerStop: { events: lagEvents, secondsOfProduction: lagEvents / producerRate },
      tailSeconds: (finished - produced) / 1000,
      relayThreads,
      consumerThreads: defaultConsumerLimits.threads,
      cpuMicrosecondsPerEvent: cpuPerEvent,
    };
    report.row(
      'e2e',
      `e2e: producer → relay → Kafka → consumer (${concurrency} producers)`,
      rate(eventsPerSecond),
      [['raw producer (best)', ratio(eventsPerSecond, best)]],
      `first commit → last consumer commit, DB clock; relay ${relayThreads} thr., consumer ${defaultConsumerLimits.threads} thr.`,
    );
    report.row(
      'e2e',
      'e2e producer rate (engine enqueue, pipeline running)',
      rate(producerRate),
      [['raw producer (best)', ratio(producerRate, best)]],
      '',
    );
    report.row(
      'e2e',
      'consumer lag when the producer stopped',
      `${lagEvents.toLocaleString('en-US')} ev`,
      [],
      `${(lagEvents / producerRate).toFixed(2)} s of production (target < 1 s)`,
    );
    report.row('e2e', 'e2e: CPU per event (process CPU time ÷ events)', '', [], describeCpu(cpuPerEvent));
  } finally {
    await roles.stop();
    await db.drop();
    await deleteTopics([topic]);
  }
}
