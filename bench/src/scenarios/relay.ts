import type { Publisher } from '@postbox/engine/runtime';
import { PlatformaticPublisher } from '../adapters/platformatic-publisher.ts';
import type { Bench } from '../context.ts';
import { rate, ratio } from '../report.ts';
import {
  benchDatabase,
  benchTopic,
  deleteTopics,
  kafka,
  perSecond,
  progressBar,
  until,
  type BenchDatabase,
} from '../support.ts';
import { fillOutbox } from '../workload/fill.ts';
import { startRelay } from '../workload/pipeline.ts';

/**
 * The relay alone: a pre-filled outbox of N rows drained to Kafka by one in-process relay with 0 (main thread),
 * 1, 2, 4 pool threads, then on the main thread through the @platformatic/kafka adapter. Each run: the relay is
 * started and warmed on an empty outbox, N rows appear in one commit, the clock runs until all are published.
 */
export async function relayScenario({ options, report }: Bench): Promise<void> {
  const db = await benchDatabase(4);
  const topic = await benchTopic('relay', options.partitions);
  try {
    const byThreads: Record<string, number> = {};
    for (const threads of options.threads) byThreads[threads] = await drainOnce(db, topic, options, threads, null);
    const platformatic = await drainOnce(db, topic, options, 0, new PlatformaticPublisher(kafka)).catch(
      (cause: unknown) => cause as Error,
    );
    const [bestThreads, best] = Object.entries(byThreads).sort((a, b) => b[1] - a[1])[0]!;
    const naive = report.baseline('naiveRelay');
    const peer = report.peer('pgTransactionalOutbox');
    const claimMark = report.baseline('claimMark');
    const readMark = report.baseline('readMark');
    const produce = report.baseline('kafkaProduce');
    report.results.scenarios.relay = {
      eventsPerSecond: best,
      bestThreads: Number(bestThreads),
      byThreads,
      ratioToNaive: ratio(best, naive),
      ratioToPeer: ratio(best, peer),
      ratioToClaimMark: ratio(best, claimMark),
      ratioToReadMark: ratio(best, readMark),
      ratioToKafkaProduce: ratio(best, produce),
      events: options.events,
      batch: options.batch,
    };
    for (const t of options.threads) {
      const v = byThreads[t]!;
      report.row(
        'relay',
        `relay, ${t === 0 ? 'main thread' : `${t} pool thread${t > 1 ? 's' : ''}`}`,
        rate(v),
        [
          ['naive relay', ratio(v, naive)],
          ['pg-transactional-outbox', ratio(v, peer)],
          ['raw claim+mark', ratio(v, claimMark)],
          ['raw read+mark', ratio(v, readMark)],
          ['raw produce', ratio(v, produce)],
        ],
        t === Number(bestThreads) ? 'best' : '',
      );
    }
    if (platformatic instanceof Error) {
      report.results.peers.platformaticKafka = {
        error: `${platformatic.message}: ${String(platformatic.cause ?? '')}`,
      };
      report.row('peer', '@platformatic/kafka adapter (main thread)', 'failed', [], platformatic.message.slice(0, 60));
    } else {
      report.results.peers.platformaticKafka = {
        eventsPerSecond: platformatic,
        threads: 0,
        ratioToKafkajsAdapter: ratio(platformatic, byThreads[0]),
      };
      report.row(
        'peer',
        'relay via @platformatic/kafka adapter (main thread)',
        rate(platformatic),
        [['kafkajs adapter, main thread', ratio(platformatic, byThreads[0])]],
        'Publisher port, same contract',
      );
    }
  } finally {
    await db.drop();
    await deleteTopics([topic]);
  }
}

async function drainOnce(
  db: BenchDatabase,
  topic: string,
  options: Bench['options'],
  threads: number,
  publisher: Publisher | null,
): Promise<number> {
  await db.sql`TRUNCATE message_outbox`;
  const running = await startRelay(db, { threads, batch: options.batch, ...(publisher ? { publisher } : {}) });
  try {
    await fillOutbox(db.sql, { topic, events: 1, payload: options.payload, prefix: `warm${threads}` });
    running.relay.wake();
    await until(() => running.relay.stats().published >= 1, 'the relay to publish its warm-up row', 60_000);
    const label = publisher ? `relay, ${publisher.constructor.name}` : `relay, ${threads} threads`;
    await fillOutbox(
      db.sql,
      { topic, events: options.events, payload: options.payload, prefix: `r${threads}` },
      progressBar(`fill outbox (${label})`, options.events),
    );
    const started = performance.now();
    running.relay.wake();
    const bar = progressBar(label, options.events);
    await until(
      () => {
        const n = running.relay.stats().published - 1;
        bar(n);
        return n >= options.events;
      },
      `${label} to publish ${options.events} rows`,
      600_000,
      10,
    );
    return perSecond(options.events, (performance.now() - started) / 1000);
  } finally {
    await running.stop();
  }
}
