import { createWaker, defaultConsumerLimits } from '@postbox/engine';
import type { Bench } from '../context.ts';
import { rate, ratio } from '../report.ts';
import {
  benchDatabase,
  benchTopic,
  deleteTopics,
  perSecond,
  progressBar,
  uniqueName,
  until,
  type BenchDatabase,
} from '../support.ts';
import { fillOutbox, fillTopic } from '../workload/fill.ts';
import { unpublished } from '../workload/pipeline.ts';
import { rssMiB, spawnConsumer, spawnRelay, type RoleProcess } from '../workload/processes.ts';
import { untilGroupStable } from '../workload/roles.ts';

const COUNTS = [1, 2, 3];

/**
 * Process scaling with the real roles: 1, 2, 3 `postbox relay` processes draining a pre-filled outbox (lanes
 * shared through their leases), then 1, 2, 3 `postbox consume` processes on one topic (partitions shared through
 * the consumer group). Each step starts its processes, waits until they share the work (lanes balanced, group
 * stable), then times N events; the resident memory of each process is read at the end of its step.
 */
export async function scaleScenario({ options, report }: Bench): Promise<void> {
  const relayThreads = report.relayThreads();
  const db = await benchDatabase(4);
  try {
    const relays: Record<string, { eventsPerSecond: number; rssMiB: number[] }> = {};
    for (const k of COUNTS) relays[k] = await relayStep(db, options, k, relayThreads);
    const consumers: Record<string, { eventsPerSecond: number; rssMiB: number[] }> = {};
    for (const k of COUNTS) consumers[k] = await consumerStep(db, options, k);
    report.results.scenarios.scale = {
      relays,
      consumers,
      relayThreads,
      consumerThreads: defaultConsumerLimits.threads,
      events: options.pipelineEvents,
    };
    for (const k of COUNTS) {
      const r = relays[k]!;
      report.row(
        'scale',
        `${k} relay process${k > 1 ? 'es' : ''} (${relayThreads} threads each)`,
        rate(r.eventsPerSecond),
        [['1 process', ratio(r.eventsPerSecond, relays[1]!.eventsPerSecond)]],
        `RSS ${r.rssMiB.map((m) => m.toFixed(0)).join(' / ')} MiB`,
      );
    }
    for (const k of COUNTS) {
      const c = consumers[k]!;
      report.row(
        'scale',
        `${k} consumer process${k > 1 ? 'es' : ''} (${defaultConsumerLimits.threads} threads each)`,
        rate(c.eventsPerSecond),
        [['1 process', ratio(c.eventsPerSecond, consumers[1]!.eventsPerSecond)]],
        `RSS ${c.rssMiB.map((m) => m.toFixed(0)).join(' / ')} MiB`,
      );
    }
  } finally {
    await db.drop();
  }
}

async function relayStep(
  db: BenchDatabase,
  options: Bench['options'],
  k: number,
  threads: number,
): Promise<{ eventsPerSecond: number; rssMiB: number[] }> {
  await db.sql`TRUNCATE message_outbox`;
  const topic = await benchTopic(`scale-relay-${k}`, options.partitions);
  const procs: RoleProcess[] = [];
  try {
    for (let i = 0; i < k; i++)
      procs.push(
        spawnRelay({
          databaseUrl: db.url,
          topic,
          partitions: options.partitions,
          threads,
          batch: options.batch,
          label: `relay ${i + 1}/${k}`,
        }),
      );
    await until(() => lanesShared(db, k), `${k} relay process(es) to share the 16 lanes`, 90_000, 250);
    // Warm every process's pool: a few rows in every lane.
    await fillOutbox(db.sql, { topic, events: 320, payload: options.payload, prefix: `warm${k}`, aggregates: 320 });
    const waker = createWaker(db.sql);
    waker.wake();
    await until(async () => (await unpublished(db.sql)) === 0, 'the relays to publish their warm-up rows', 90_000, 100);
    await fillOutbox(
      db.sql,
      { topic, events: options.pipelineEvents, payload: options.payload, prefix: `s${k}` },
      progressBar(`fill outbox (${k} relay processes)`, options.pipelineEvents),
    );
    const started = performance.now();
    waker.wake();
    const bar = progressBar(`${k} relay process(es)`, options.pipelineEvents);
    await until(
      async () => {
        const left = await unpublished(db.sql);
        bar(options.pipelineEvents - left);
        return left === 0;
      },
      `${k} relay process(es) to publish ${options.pipelineEvents} rows`,
      600_000,
      50,
    );
    const seconds = (performance.now() - started) / 1000;
    const rss = await Promise.all(procs.map((p) => rssMiB(p.pid)));
    return { eventsPerSecond: perSecond(options.pipelineEvents, seconds), rssMiB: rss.map((r) => r ?? 0) };
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
    await deleteTopics([topic]);
  }
}

/** Every one of k live relays holds lanes, and none holds more than one above its fair share. */
async function lanesShared(db: BenchDatabase, k: number): Promise<boolean> {
  const rows = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM relay_lane WHERE owner IS NOT NULL AND lease_until > now() GROUP BY owner`;
  return (
    rows.length === k &&
    rows.reduce((s, r) => s + r.n, 0) === 16 &&
    Math.max(...rows.map((r) => r.n)) <= Math.ceil(16 / k)
  );
}

async function consumerStep(
  db: BenchDatabase,
  options: Bench['options'],
  k: number,
): Promise<{ eventsPerSecond: number; rssMiB: number[] }> {
  const topic = await benchTopic(`scale-consume-${k}`, options.partitions);
  const name = uniqueName(`bench-scale-${k}`);
  const procs: RoleProcess[] = [];
  try {
    for (let i = 0; i < k; i++)
      procs.push(
        spawnConsumer({
          databaseUrl: db.url,
          topic,
          consumer: name,
          threads: defaultConsumerLimits.threads,
          label: `consumer ${i + 1}/${k}`,
        }),
      );
    await untilGroupStable(`postbox.${name}`, k);
    const started = performance.now();
    const filling = fillTopic({ topic, events: options.pipelineEvents, payload: options.payload, prefix: `c${k}` });
    const bar = progressBar(`${k} consumer process(es)`, options.pipelineEvents);
    await until(
      async () => {
        const [row] = await db.sql<
          { n: number }[]
        >`SELECT count(*)::int AS n FROM message_inbox WHERE consumer_name = ${name}`;
        bar(row!.n);
        return row!.n >= options.pipelineEvents;
      },
      `${k} consumer process(es) to commit ${options.pipelineEvents} events`,
      600_000,
      100,
    );
    await filling;
    const seconds = (performance.now() - started) / 1000;
    const rss = await Promise.all(procs.map((p) => rssMiB(p.pid)));
    return { eventsPerSecond: perSecond(options.pipelineEvents, seconds), rssMiB: rss.map((r) => r ?? 0) };
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
    await deleteTopics([topic]);
  }
}
