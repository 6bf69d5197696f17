import { createWaker, defaultConsumerLimits, type Sql } from '@postbox/engine';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchDatabase, benchTopic, deleteTopics, progressBar } from '../support.ts';
import { engineOrderWriter, openLoop } from '../workload/business.ts';
import { startRoles, untilCommitted } from '../workload/roles.ts';

const LEVELS = [10, 50, 80];
const MAX_IN_FLIGHT = 64;

export interface LatencyLevel {
  offeredPerSecond: number;
  achievedPerSecond: number;
  shed: number;
  events: number;
  p50Ms: number;
  p95Ms: number;
  p99Ms: number;
  maxMs: number;
  /**
   * From the moment the producer's COMMIT returned (its wall clock) to projection.updated_at (the same machine's
   * clock, read by PostgreSQL): what a service waits after its transaction commits. The figures above count from
   * the transaction's now(), so they also hold the producer's own transaction time.
   */
  fromCommit: { p50Ms: number; p95Ms: number; p99Ms: number };
  /** The trip split where the outbox row was marked published (after the broker's ack): relay, then consumer. */
  stages: { relayP50Ms: number; relayP99Ms: number; consumerP50Ms: number; consumerP99Ms: number };
}

/**
 * Open-loop load at 10 %, 50 % and 80 % of the measured e2e maximum, one window each (twice the usual window),
 * through one running pipeline (a `postbox relay` process woken after each commit, a `postbox consume` process). Each event is a
 * new order; its latency is projection.updated_at (clock_timestamp() in the handler, just before the consumer's
 * commit) − outbox.created_at (now() of the producer's transaction, just before its commit): both from the
 * database clock, so no client clock enters the figure.
 */
export async function latencyScenario({ options, report }: Bench): Promise<void> {
  const max = report.results.scenarios.e2e?.eventsPerSecond as number | undefined;
  if (!max) throw new Error('bench: latency needs the e2e maximum; run it with e2e (all and latency do)');
  const relayThreads = report.relayThreads();
  const db = await benchDatabase(MAX_IN_FLIGHT);
  const topic = await benchTopic('latency', options.partitions);
  const roles = await startRoles(db, {
    topic,
    partitions: options.partitions,
    relayThreads,
    consumerThreads: defaultConsumerLimits.threads,
    batch: options.batch,
    label: 'latency',
  });
  try {
    // Every connection the producer may use, opened now, so no level pays the pool's connection handshakes
    // (steady state of a service). The first second of the 50 % level still shows the burst measured before
    // this warm-up: its cause is elsewhere (bench/RESULTS.md, latency).
    const reserved = await Promise.all(Array.from({ length: MAX_IN_FLIGHT }, () => db.sql.reserve()));
    for (const connection of reserved) connection.release();
    const waker = createWaker(db.sql);
    await engineOrderWriter(db.sql, waker, { topic, payload: options.payload, prefix: 'warm' }).place(0);
    await untilCommitted(roles, 1, 60_000);
    const levels: Record<string, LatencyLevel> = {};
    let total = 1;
    for (const pct of LEVELS) {
      const offered = (max * pct) / 100;
      const prefix = `lat${pct}`;
      const committedAt = new Map<string, number>();
      const writer = engineOrderWriter(db.sql, waker, {
        topic,
        payload: options.payload,
        prefix,
        onCommitted: (id, at) => committedAt.set(id, at),
      });
      const bar = progressBar(`latency at ${pct} % (${Math.round(offered)} ev/s)`, options.windowMs * 2);
      const started = performance.now();
      const watch = setInterval(
        () => bar(Math.min(options.windowMs * 2, Math.round(performance.now() - started))),
        100,
      );
      const load = await openLoop(writer, offered, options.windowMs * 2, MAX_IN_FLIGHT, 0).finally(() =>
        clearInterval(watch),
      );
      bar(options.windowMs * 2);
      total += load.completed;
      await untilCommitted(roles, total, 600_000);
      levels[`at${pct}`] = {
        offeredPerSecond: offered,
        achievedPerSecond: load.completed / load.seconds,
        shed: load.shed,
        events: load.completed,
        ...(await percentiles(db.sql, prefix)),
        fromCommit: await fromCommit(db.sql, prefix, committedAt),
      };
    }
    report.results.scenarios.latency = {
      e2eMaxEventsPerSecond: max,
      ...levels,
      windowMs: options.windowMs * 2,
      relayThreads,
      consumerThreads: defaultConsumerLimits.threads,
    };
    for (const pct of LEVELS) {
      const l = levels[`at${pct}`]!;
      const note = pct === 50 ? 'target p50 ≤ 10 ms, p99 ≤ 50 ms' : '';
      report.row(
        'latency',
        `latency at ${pct} % of e2e max (${rate(l.offeredPerSecond)})`,
        `p50 ${ms(l.p50Ms)}  p95 ${ms(l.p95Ms)}  p99 ${ms(l.p99Ms)}  max ${ms(l.maxMs)}`,
        [],
        [
          note,
          `from COMMIT returned: p50 ${ms(l.fromCommit.p50Ms)} p99 ${ms(l.fromCommit.p99Ms)};`,
          `relay (commit → marked published) p50 ${ms(l.stages.relayP50Ms)} p99 ${ms(l.stages.relayP99Ms)};`,
          `consumer (marked → applied) p50 ${ms(l.stages.consumerP50Ms)} p99 ${ms(l.stages.consumerP99Ms)}`,
          l.shed > 0 ? `${l.shed} arrivals shed` : '',
        ]
          .filter(Boolean)
          .join(' '),
      );
    }
  } finally {
    await roles.stop();
    await db.drop();
    await deleteTopics([topic]);
  }
}

const ms = (v: number) => `${v.toFixed(1)} ms`;

/** Commit-to-consumer-commit percentiles of one level's events, from the database clock at both ends. */
export async function percentiles(
  sql: Sql,
  prefix: string,
): Promise<Pick<LatencyLevel, 'p50Ms' | 'p95Ms' | 'p99Ms' | 'maxMs' | 'stages'>> {
  const [row] = await sql<{ p: number[]; max: number; relay: number[]; consumer: number[] }[]>`
    SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ms) AS p, max(ms) AS max,
           percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY relay_ms) AS relay,
           percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY consumer_ms) AS consumer
    FROM (SELECT extract(epoch FROM p.updated_at - o.created_at)::float8 * 1000 AS ms,
                 extract(epoch FROM o.published_at - o.created_at)::float8 * 1000 AS relay_ms,
                 extract(epoch FROM p.updated_at - o.published_at)::float8 * 1000 AS consumer_ms
          FROM message_outbox o JOIN demo_order_projection p ON p.order_id = o.aggregate_id
          WHERE o.aggregate_id LIKE ${`${prefix}-%`}) AS l`;
  return {
    p50Ms: row!.p[0]!,
    p95Ms: row!.p[1]!,
    p99Ms: row!.p[2]!,
    maxMs: row!.max,
    stages: {
      relayP50Ms: row!.relay[0]!,
      relayP99Ms: row!.relay[1]!,
      consumerP50Ms: row!.consumer[0]!,
      consumerP99Ms: row!.consumer[1]!,
    },
  };
}

/**
 * Percentiles from each order's COMMIT returning in this process (wall clock) to its projection's updated_at
 * (PostgreSQL's clock_timestamp() on this same machine, so one clock).
 */
async function fromCommit(
  sql: Sql,
  prefix: string,
  committedAt: Map<string, number>,
): Promise<LatencyLevel['fromCommit']> {
  const rows = await sql<{ order_id: string; at: number }[]>`
    SELECT order_id, (extract(epoch FROM updated_at) * 1000)::float8 AS at
    FROM demo_order_projection WHERE order_id LIKE ${`${prefix}-%`}`;
  const waits = rows
    .filter((r) => committedAt.has(r.order_id))
    .map((r) => r.at - committedAt.get(r.order_id)!)
    .sort((a, b) => a - b);
  const at = (q: number) => waits[Math.min(waits.length - 1, Math.floor(q * waits.length))] ?? Number.NaN;
  return { p50Ms: at(0.5), p95Ms: at(0.95), p99Ms: at(0.99) };
}
