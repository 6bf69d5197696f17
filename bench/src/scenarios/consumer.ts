import { defaultConsumerLimits, type ConsumerLimits } from '@postbox/engine';
import type { Bench } from '../context.ts';
import { rate, ratio } from '../report.ts';
import {
  benchDatabase,
  benchTopic,
  deleteTopics,
  perSecond,
  progressBar,
  sleep,
  uniqueName,
  until,
  type BenchDatabase,
} from '../support.ts';
import { machineCpuCount, startCpuMeter } from '../workload/cpu.ts';
import { fillTopic } from '../workload/fill.ts';
import { committed, startConsumer } from '../workload/pipeline.ts';

const THREADS = defaultConsumerLimits.threads;
/**
 * A larger prefetch than the default (4000 events, 16 MiB): the consumer pauses its partitions at the cap and
 * resumes below half (from the records the subscriber holds); this run shows what the cap still costs.
 */
const WIDE: Partial<ConsumerLimits> = { maxInFlightEvents: 8000, maxInFlightBytes: 64 * 1024 * 1024 };
/** The projection handler's default export only: one upsert per event. */
const PER_EVENT_HANDLER = new URL('../workload/projection-handler.per-event.ts', import.meta.url);

/**
 * The consumer alone: a pre-filled topic of N events consumed into the inbox (+ projection) by the consumer
 * runtime with its default pool (2 threads × 2 connections), once with one transaction per event
 * (maxBatchEvents 1), once with shared transactions (the default, up to 500 events) and the per-event handler
 * (one upsert per event, one after the other), once with shared transactions and the module's `handleBatch`
 * (one upsert per task: the figure compared with the raw batched inbox, which writes set-based too), and once
 * more with a wider prefetch (8000 events, 64 MiB), which shows what the default cap costs. Timed from the first
 * record received (the group join is left out) until all N are committed, or for at most 2 windows.
 */
export async function consumerScenario({ options, report }: Bench): Promise<void> {
  const db = await benchDatabase(4);
  const topic = await benchTopic('consumer', options.partitions);
  try {
    await fillTopic(
      { topic, events: options.events, payload: options.payload },
      progressBar('fill topic (consumer)', options.events),
    );
    const perEvent = await consumeOnce(db, topic, options, 'per-event', { maxBatchEvents: 1 }, PER_EVENT_HANDLER);
    const shared = await consumeOnce(db, topic, options, 'shared', {}, PER_EVENT_HANDLER);
    const batched = await consumeOnce(db, topic, options, 'shared-batch', {});
    const wide = await consumeOnce(db, topic, options, 'shared-wide', WIDE);
    const rawOne = report.baseline('inboxPerEvent');
    const rawBatch = report.baseline('inboxBatched');
    const rawConsume = report.baseline('kafkaConsume');
    report.results.scenarios.consumer = {
      eventsPerSecond: batched.rate,
      perEvent: { ...perEvent, ratioToRawInboxPerEvent: ratio(perEvent.rate, rawOne) },
      sharedTransactions: {
        ...shared,
        ratioToRawInboxBatched: ratio(shared.rate, rawBatch),
        ratioToRawConsume: ratio(shared.rate, rawConsume),
      },
      batchHandler: {
        ...batched,
        ratioToRawInboxBatched: ratio(batched.rate, rawBatch),
        ratioToRawConsume: ratio(batched.rate, rawConsume),
        ratioToPerEventHandler: ratio(batched.rate, shared.rate),
      },
      sharedWidePrefetch: {
        ...wide,
        ...WIDE,
        ratioToRawInboxBatched: ratio(wide.rate, rawBatch),
        ratioToDefaultPrefetch: ratio(wide.rate, batched.rate),
      },
      threads: THREADS,
    };
    report.row(
      'consumer',
      `consumer, one transaction per event (${THREADS} threads)`,
      rate(perEvent.rate),
      [['raw inbox per event', ratio(perEvent.rate, rawOne)]],
      `${perEvent.events} events in ${perEvent.seconds.toFixed(1)} s`,
    );
    report.row(
      'consumer',
      `consumer, shared transactions (≤ ${defaultConsumerLimits.maxBatchEvents}), handler per event`,
      rate(shared.rate),
      [
        ['raw inbox batched', ratio(shared.rate, rawBatch)],
        ['raw consume', ratio(shared.rate, rawConsume)],
      ],
      `${shared.events} events in ${shared.seconds.toFixed(1)} s`,
    );
    report.row(
      'consumer',
      `consumer, shared transactions (≤ ${defaultConsumerLimits.maxBatchEvents}), handleBatch`,
      rate(batched.rate),
      [
        ['raw inbox batched', ratio(batched.rate, rawBatch)],
        ['raw consume', ratio(batched.rate, rawConsume)],
        ['handler per event', ratio(batched.rate, shared.rate)],
      ],
      `${batched.events} events in ${batched.seconds.toFixed(1)} s; ${describeConsumerCpu(batched)}`,
    );
    report.row(
      'consumer',
      'consumer, handleBatch, prefetch 8000 ev / 64 MiB',
      rate(wide.rate),
      [
        ['raw inbox batched', ratio(wide.rate, rawBatch)],
        ['default prefetch', ratio(wide.rate, batched.rate)],
      ],
      `what the default cap costs; ${describeConsumerCpu(wide)}`,
    );
  } finally {
    await db.drop();
    await deleteTopics([topic]);
  }
}

interface ConsumeRun {
  rate: number;
  events: number;
  seconds: number;
  pauses: number;
  tasks: number;
  /**
   * CPU microseconds per event: the consumer (this process, all its threads), the rest of the machine (PostgreSQL,
   * Kafka, the kernel), and the machine's idle share over the run (iowait counted as idle) — idle cores mean the
   * consumer waited, not worked.
   */
  cpu: { consumerUs: number; restUs: number; machineUs: number; machineIdle: number };
}

/** "CPU: consumer 58 µs, rest 31 µs per event (machine 89 µs), machine 11 % idle, 25 pauses" */
function describeConsumerCpu(run: ConsumeRun): string {
  const c = run.cpu;
  const us = (n: number) => `${Math.round(n).toLocaleString('en-US')} µs`;
  return `CPU: consumer ${us(c.consumerUs)}, rest ${us(c.restUs)} per event (machine ${us(c.machineUs)}), machine ${Math.round(c.machineIdle * 100)} % idle, ${run.pauses} pauses`;
}

async function consumeOnce(
  db: BenchDatabase,
  topic: string,
  options: Bench['options'],
  label: string,
  limits: Partial<ConsumerLimits>,
  handler?: URL,
): Promise<ConsumeRun> {
  const consumer = await startConsumer(db, {
    name: uniqueName(`bench-consumer-${label}`),
    topic,
    threads: THREADS,
    limits,
    ...(handler ? { handler } : {}),
  });
  try {
    await until(() => consumer.stats().received > 0, 'the consumer to receive its first record', 60_000, 5);
    const started = performance.now();
    const cpu = startCpuMeter({ producer: true });
    const capMs = options.windowMs * 2;
    const bar = progressBar(`consumer, ${label}`, options.events);
    while (committed(consumer.stats()) < options.events && performance.now() - started < capMs) {
      bar(committed(consumer.stats()));
      await sleep(10);
    }
    const stats = consumer.stats();
    const events = committed(stats);
    bar(options.events);
    const seconds = (performance.now() - started) / 1000;
    const used = cpu.perEvent(events);
    // Busy time excludes iowait: a core waiting on a flush counts as idle here (the consumer waited, not worked).
    const idle = events > 0 ? 1 - (used.machine * events) / 1e6 / (seconds * machineCpuCount()) : 0;
    return {
      rate: perSecond(events, seconds),
      events,
      seconds,
      pauses: stats.pauses,
      tasks: stats.tasks,
      // The consumer runs in this process: its CPU is the meter's "producer" (this process's own time).
      cpu: {
        consumerUs: used.producer ?? 0,
        restUs: used.rest,
        machineUs: used.machine,
        machineIdle: Math.max(0, idle),
      },
    };
  } finally {
    await consumer.stop();
  }
}
