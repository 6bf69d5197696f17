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
import { fillTopic } from '../workload/fill.ts';
import { committed, startConsumer } from '../workload/pipeline.ts';

const THREADS = defaultConsumerLimits.threads;
/**
 * A larger prefetch than the default (1000 events, 16 MiB): the consumer pauses its partitions at the cap and
 * resumes below half, and each resume waits for kafkajs' next fetch; this run shows what that cadence costs.
 */
const WIDE: Partial<ConsumerLimits> = { maxInFlightEvents: 8000, maxInFlightBytes: 64 * 1024 * 1024 };

/**
 * The consumer alone: a pre-filled topic of N events consumed into the inbox (+ projection) by the consumer
 * runtime with its default pool (2 threads × 2 connections), once with one transaction per event
 * (maxBatchEvents 1), once with shared transactions (the default, up to 200 events, handlers one after the
 * other) and once more with a wider prefetch (8000 events, 64 MiB), which shows what the pause/resume cadence at
 * the default cap costs. Timed from the first
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
    const perEvent = await consumeOnce(db, topic, options, 'per-event', { maxBatchEvents: 1 });
    const shared = await consumeOnce(db, topic, options, 'shared', {});
    const wide = await consumeOnce(db, topic, options, 'shared-wide', WIDE);
    const rawOne = report.baseline('inboxPerEvent');
    const rawBatch = report.baseline('inboxBatched');
    const rawConsume = report.baseline('kafkaConsume');
    report.results.scenarios.consumer = {
      eventsPerSecond: shared.rate,
      perEvent: { ...perEvent, ratioToRawInboxPerEvent: ratio(perEvent.rate, rawOne) },
      sharedTransactions: {
        ...shared,
        ratioToRawInboxBatched: ratio(shared.rate, rawBatch),
        ratioToRawConsume: ratio(shared.rate, rawConsume),
      },
      sharedWidePrefetch: {
        ...wide,
        ...WIDE,
        ratioToRawInboxBatched: ratio(wide.rate, rawBatch),
        ratioToDefaultPrefetch: ratio(wide.rate, shared.rate),
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
      `consumer, shared transactions (≤ ${defaultConsumerLimits.maxBatchEvents})`,
      rate(shared.rate),
      [
        ['raw inbox batched', ratio(shared.rate, rawBatch)],
        ['raw consume', ratio(shared.rate, rawConsume)],
      ],
      `${shared.events} events in ${shared.seconds.toFixed(1)} s`,
    );
    report.row(
      'consumer',
      'consumer, shared transactions, prefetch 8000 ev / 64 MiB',
      rate(wide.rate),
      [
        ['raw inbox batched', ratio(wide.rate, rawBatch)],
        ['default prefetch', ratio(wide.rate, shared.rate)],
      ],
      'the pause/resume cadence at the default cap',
    );
  } finally {
    await db.drop();
    await deleteTopics([topic]);
  }
}

async function consumeOnce(
  db: BenchDatabase,
  topic: string,
  options: Bench['options'],
  label: string,
  limits: Partial<ConsumerLimits>,
): Promise<{ rate: number; events: number; seconds: number; pauses: number; tasks: number }> {
  const consumer = await startConsumer(db, {
    name: uniqueName(`bench-consumer-${label}`),
    topic,
    threads: THREADS,
    limits,
  });
  try {
    await until(() => consumer.stats().received > 0, 'the consumer to receive its first record', 60_000, 5);
    const started = performance.now();
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
    return { rate: perSecond(events, seconds), events, seconds, pauses: stats.pauses, tasks: stats.tasks };
  } finally {
    await consumer.stop();
  }
}
