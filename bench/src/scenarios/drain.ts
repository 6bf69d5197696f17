import { createWaker, defaultConsumerLimits } from '@postbox/engine';
import type { Bench } from '../context.ts';
import { rate, ratio } from '../report.ts';
import { BROKER_LABEL, brokerTopic, type BenchBroker } from '../brokers.ts';
import { benchDatabase, perSecond, progressBar, uniqueName } from '../support.ts';
import { fillOutbox } from '../workload/fill.ts';
import { describeCpu, startCpuMeter } from '../workload/cpu.ts';
import { startRoles, untilCommitted } from '../workload/roles.ts';

/** Result keys and raw baselines per broker. */
const PER_BROKER = {
  kafka: { result: 'drain', produce: 'kafkaProduce', consume: 'kafkaConsume' },
  nats: { result: 'drainNats', produce: 'natsPublish', consume: 'natsConsume' },
  rabbitmq: { result: 'drainRabbitmq', produce: 'rabbitmqPublish', consume: 'rabbitmqConsume' },
} as const;

/**
 * A pre-filled outbox of N events → a `postbox relay` process → the broker → a `postbox consume` process →
 * committed, for each `--broker`. Both roles are started and warmed first (one event through), then the N rows
 * appear in one commit; the clock runs from that commit to the consumer's commit of the last event. Bounded by its
 * slowest raw stage: min(raw read + mark, the broker's raw produce, its raw consume, raw batched inbox).
 */
export async function drainScenario(bench: Bench): Promise<void> {
  for (const broker of bench.options.brokers) await drainOn(bench, broker);
}

async function drainOn({ options, report }: Bench, broker: BenchBroker): Promise<void> {
  const relayThreads = report.relayThreads();
  const events = options.pipelineEvents;
  const names = PER_BROKER[broker];
  const db = await benchDatabase(4);
  const consumerName = uniqueName('bench-drain');
  const target = await brokerTopic(broker, 'drain', options.partitions, [`postbox.${consumerName}`]);
  const topic = target.topic;
  const roles = await startRoles(db, {
    topic,
    partitions: options.partitions,
    relayThreads,
    consumerThreads: defaultConsumerLimits.threads,
    batch: options.batch,
    label: broker === 'kafka' ? 'drain' : `drain ${broker}`,
    broker,
    consumerName,
  });
  try {
    const waker = createWaker(db.sql);
    await fillOutbox(db.sql, { topic, events: 1, payload: options.payload, prefix: 'warm' });
    waker.wake();
    await untilCommitted(roles, 1, 60_000);
    await fillOutbox(
      db.sql,
      { topic, events, payload: options.payload, prefix: 'd' },
      progressBar('fill outbox (drain)', events),
    );
    const started = performance.now();
    const cpu = startCpuMeter({ relay: roles.relay.pid, consumer: roles.consumer.pid });
    waker.wake();
    const bar = progressBar('drain: outbox → consumer commit', events);
    await untilCommitted(roles, events + 1, 600_000, (n) => bar(Math.max(0, n - 1)));
    const seconds = (performance.now() - started) / 1000;
    const cpuPerEvent = cpu.perEvent(events);
    const eventsPerSecond = perSecond(events, seconds);
    // The relay's database stage as Postbox runs it (read + mark, migration 0014), not the seed's claim + mark.
    const stages = {
      readMark: report.baseline('readMark'),
      [names.produce]: report.baseline(names.produce),
      [names.consume]: report.baseline(names.consume),
      inboxBatched: report.baseline('inboxBatched'),
    };
    const known = Object.entries(stages).filter((e): e is [string, number] => e[1] !== null);
    const slowest = known.sort((a, b) => a[1] - b[1])[0] ?? null;
    report.results.scenarios[names.result] = {
      eventsPerSecond,
      ratioToProduce: ratio(eventsPerSecond, stages[names.produce]),
      ratioToConsume: ratio(eventsPerSecond, stages[names.consume]),
      ratioToSlowestStage: ratio(eventsPerSecond, slowest?.[1]),
      slowestStage: slowest?.[0] ?? null,
      events,
      seconds,
      relayThreads,
      consumerThreads: defaultConsumerLimits.threads,
      cpuMicrosecondsPerEvent: cpuPerEvent,
    };
    const on = broker === 'kafka' ? '' : ` on ${BROKER_LABEL[broker]}`;
    report.row(
      'drain',
      `drain${on}: pre-filled outbox → consumer commit`,
      rate(eventsPerSecond),
      [
        [`slowest raw stage (${slowest?.[0] ?? '?'})`, ratio(eventsPerSecond, slowest?.[1])],
        ['raw produce', ratio(eventsPerSecond, stages[names.produce])],
        ['raw consume', ratio(eventsPerSecond, stages[names.consume])],
      ],
      `relay ${relayThreads} thr., consumer ${defaultConsumerLimits.threads} thr. (processes)`,
    );
    report.row('drain', `drain${on}: CPU per event (process CPU time ÷ events)`, '', [], describeCpu(cpuPerEvent));
  } finally {
    await roles.stop();
    await db.drop();
    await target.drop();
  }
}
