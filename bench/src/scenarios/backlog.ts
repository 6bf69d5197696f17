import { createWaker, defaultConsumerLimits, type Sql } from '@postbox/engine';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchDatabase, benchTopic, deleteTopics, perSecond, progressBar, sleep, uniqueName } from '../support.ts';
import { fillOutbox } from '../workload/fill.ts';
import { unpublished } from '../workload/pipeline.ts';
import { rssMiB, spawnConsumer, spawnRelay, type RoleProcess } from '../workload/processes.ts';

interface Sample {
  t: number;
  published: number;
  consumed: number;
  relayMiB: number | null;
  consumerMiB: number | null;
  deadTuples: number;
}

/** After the outbox is drained, the consumer keeps working on the topic's backlog for this long. */
const CONSUMER_TAIL_MS = 20_000;

/**
 * A large backlog with the real roles: N rows committed to the outbox at once, then one `postbox relay` and one
 * `postbox consume` process start together. The relay drains the outbox (its claim rate from 5 to 25 % and from
 * 70 to 90 % of the rows shows whether dead tuples slow the claim); the consumer faces a topic backlog that grows
 * as long as the relay outruns it. Resident memory of both is sampled every second; rssGrowth is the larger of
 * the two roles' end ÷ start (a role's start = its first sample past a tenth of its work, past start-up). The run ends a
 * little after the outbox is drained (or at the window inside `all --quick`); the consumer's remaining lag is
 * reported, not waited for.
 */
export async function backlogScenario({ options, report }: Bench): Promise<void> {
  const relayThreads = report.relayThreads();
  const n = options.backlogEvents;
  const db = await benchDatabase(2);
  const topic = await benchTopic('backlog', options.partitions);
  const procs: RoleProcess[] = [];
  try {
    await fillOutbox(
      db.sql,
      { topic, events: n, payload: options.payload, prefix: 'bl' },
      progressBar(`fill outbox (backlog ${n.toLocaleString('en-US')})`, n),
    );
    await db.sql`ANALYZE message_outbox`;
    const relay = spawnRelay({
      databaseUrl: db.url,
      topic,
      partitions: options.partitions,
      threads: relayThreads,
      batch: options.batch,
      label: 'backlog relay',
    });
    const consumer = spawnConsumer({
      databaseUrl: db.url,
      topic,
      consumer: uniqueName('bench-backlog'),
      threads: defaultConsumerLimits.threads,
      label: 'backlog consumer',
    });
    procs.push(relay, consumer);
    createWaker(db.sql).wake();
    const samples = await sample(db.sql, n, relay, consumer, options.backlogWindowMs);
    report.results.scenarios.backlog = summarize(samples, n, relayThreads, options.backlogWindowMs);
    addRows(report, report.results.scenarios.backlog as ReturnType<typeof summarize>);
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
    await db.drop();
    await deleteTopics([topic]);
  }
}

async function sample(
  sql: Sql,
  n: number,
  relay: RoleProcess,
  consumer: RoleProcess,
  windowMs: number,
): Promise<Sample[]> {
  const samples: Sample[] = [];
  const started = performance.now();
  const bar = progressBar('backlog: relay drains the outbox', n);
  let drainedAt: number | null = null;
  for (;;) {
    await sleep(1000);
    const t = (performance.now() - started) / 1000;
    const [left, relayMiB, consumerMiB, dead] = await Promise.all([
      unpublished(sql),
      rssMiB(relay.pid),
      rssMiB(consumer.pid),
      deadTuples(sql),
    ]);
    samples.push({ t, published: n - left, consumed: consumer.committed(), relayMiB, consumerMiB, deadTuples: dead });
    bar(n - left);
    if (relayMiB === null || consumerMiB === null)
      throw new Error(
        `bench: a backlog role exited early (relay pid ${relay.pid}: ${relayMiB === null ? 'gone' : 'alive'}, consumer pid ${consumer.pid}: ${consumerMiB === null ? 'gone' : 'alive'})`,
      );
    if (left === 0 && drainedAt === null) drainedAt = t;
    const tailDone = drainedAt !== null && (t - drainedAt) * 1000 >= CONSUMER_TAIL_MS;
    if (tailDone || consumer.committed() >= n || (windowMs > 0 && t * 1000 >= windowMs)) return samples;
  }
}

async function deadTuples(sql: Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`SELECT coalesce(sum(n_dead_tup), 0)::int AS n FROM pg_stat_user_tables
     WHERE relid IN (SELECT relid FROM pg_partition_tree('message_outbox') WHERE isleaf)`;
  return row?.n ?? 0;
}

/**
 * The relay's rate while it published from fraction `a` to fraction `b` of `total` (the last sample at or
 * below a, the first at or past b). Fractions keep the start-up (first 5 %) and the last lanes' tail (past 90 %) out of the figure.
 */
function claimRate(samples: Sample[], total: number, a: number, b: number): number {
  const before = samples.filter((s) => s.published <= a * total).at(-1) ?? samples[0]!;
  const to = samples.find((s) => s.published >= b * total);
  return to && to.t > before.t ? (to.published - before.published) / (to.t - before.t) : 0;
}

function summarize(samples: Sample[], n: number, relayThreads: number, windowMs: number) {
  const last = samples.at(-1)!;
  const drained = samples.find((s) => s.published >= n);
  const relayEnd = drained?.t ?? last.t;
  const total = drained ? n : last.published;
  const claimStart = claimRate(samples, total, 0.05, 0.25);
  const claimEnd = claimRate(samples, total, 0.7, 0.9);
  // A role's start is its first sample past a tenth of the work it did in the run: start-up (module loading,
  // JIT, pools, the first fetches) is not growth under backlog.
  const role = (field: 'relayMiB' | 'consumerMiB', work: 'published' | 'consumed') => {
    const steady = samples.find((s) => s[work] >= last[work] / 10) ?? samples[0]!;
    return {
      startMiB: steady[field]!,
      startAt: steady.t,
      endMiB: last[field]!,
      peakMiB: Math.max(...samples.map((s) => s[field] ?? 0)),
      growth: last[field]! / steady[field]!,
    };
  };
  const relay = role('relayMiB', 'published');
  const consumer = role('consumerMiB', 'consumed');
  return {
    rssGrowth: Math.max(relay.growth, consumer.growth),
    events: n,
    capped: windowMs > 0 && drained === undefined,
    seconds: last.t,
    rss: { relay, consumer },
    claimRate: {
      startPerSecond: claimStart,
      endPerSecond: claimEnd,
      endOverStart: claimStart > 0 ? claimEnd / claimStart : null,
    },
    drainRate: {
      relayPerSecond: perSecond(drained ? n : last.published, relayEnd),
      consumerPerSecond: perSecond(last.consumed, last.t),
      published: last.published,
      consumed: last.consumed,
    },
    maxTopicBacklog: Math.max(...samples.map((s) => s.published - s.consumed)),
    deadTuplesAtEnd: last.deadTuples,
    relayThreads,
    consumerThreads: defaultConsumerLimits.threads,
    samples: samples.map((s) => ({
      t: Math.round(s.t * 10) / 10,
      published: s.published,
      consumed: s.consumed,
      relayMiB: round(s.relayMiB),
      consumerMiB: round(s.consumerMiB),
      deadTuples: s.deadTuples,
    })),
  };
}

const round = (v: number | null) => (v === null ? null : Math.round(v));

function addRows(report: Bench['report'], b: ReturnType<typeof summarize>): void {
  const mib = (r: { startMiB: number; endMiB: number; peakMiB: number }) =>
    `${r.startMiB.toFixed(0)} → ${r.endMiB.toFixed(0)} MiB (peak ${r.peakMiB.toFixed(0)})`;
  const scope = `${b.events.toLocaleString('en-US')}-event backlog${b.capped ? `, first ${b.seconds.toFixed(0)} s` : ''}`;
  report.row('backlog', `relay RSS, ${scope}`, mib(b.rss.relay), [['start', b.rss.relay.growth]], 'end ÷ start');
  report.row(
    'backlog',
    `consumer RSS, ${scope}`,
    mib(b.rss.consumer),
    [['start', b.rss.consumer.growth]],
    `topic backlog up to ${b.maxTopicBacklog.toLocaleString('en-US')} events`,
  );
  report.row(
    'backlog',
    'claim rate, 5–25 % → 70–90 % of the outbox',
    `${rate(b.claimRate.startPerSecond)} → ${rate(b.claimRate.endPerSecond)}`,
    [['start', b.claimRate.endOverStart]],
    `${b.deadTuplesAtEnd.toLocaleString('en-US')} dead tuples at the end (target ≥ 0.80×)`,
  );
  report.row(
    'backlog',
    'drain rate: relay (outbox → Kafka) / consumer',
    `${rate(b.drainRate.relayPerSecond)} / ${rate(b.drainRate.consumerPerSecond)}`,
    [],
    `published ${b.drainRate.published.toLocaleString('en-US')}, consumed ${b.drainRate.consumed.toLocaleString('en-US')}`,
  );
}
