import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createWaker, defaultConsumerLimits, type Sql, type Waker } from '@postbox/engine';
import { KafkaOffsets } from '@postbox/engine/kafka';
import { resolveRetentionPolicy, runRetention, storageReport, type StorageTable } from '@postbox/engine/retention';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchDatabase, benchTopic, deleteTopics, kafka, progressBar, until } from '../support.ts';
import { engineOrderWriter, openLoop } from '../workload/business.ts';
import { fillOutbox } from '../workload/fill.ts';
import { unpublished } from '../workload/pipeline.ts';
import { startRoles, type PipelineRoles } from '../workload/roles.ts';
import { percentiles } from './latency.ts';

const DAY_MS = 86_400_000;
/** Days of traffic the installation has kept when the scenario starts; the window keeps the last WINDOW_DAYS. */
const HISTORY_DAYS = 60;
const WINDOW_DAYS = 30;
const MAX_IN_FLIGHT = 32;
/** The live load when the run has no e2e maximum to take half of (run alone). */
const DEFAULT_LOAD_PER_SECOND = 200;

/** One measurement of the running pipeline: what the tables hold, the relay's claim rate, the live load's latency. */
interface Measurement {
  tables: Record<string, Pick<StorageTable, 'partitions' | 'rows' | 'bytes'>>;
  claimPerSecond: number;
  load: { perSecond: number; events: number; p50Ms: number; p99Ms: number };
}

/**
 * Retention under load (issue 23): an installation that has kept HISTORY_DAYS days of daily-partitioned traffic
 * (ids of those days, published, taken in by the consumer) while a `postbox relay` and a `postbox consume` run.
 * Measured before and after: table sizes, the relay's claim rate on a fresh backlog, and the commit-to-applied
 * latency of a live open-loop load. Between the two, WINDOW_DAYS simulated days pass: retention runs once per
 * day with its clock a day later each time (`--as-of`), so each run archives and drops one day of both tables
 * while the live load goes on (its latency is reported as "during").
 */
export async function retentionScenario({ options, report }: Bench): Promise<void> {
  const perDay = options.retentionEventsPerDay;
  const e2eMax = report.results.scenarios.e2e?.eventsPerSecond as number | undefined;
  const loadPerSecond = e2eMax ? e2eMax / 2 : DEFAULT_LOAD_PER_SECOND;
  const db = await benchDatabase(MAX_IN_FLIGHT + 4);
  const topic = await benchTopic('retention', options.partitions);
  const archiveDir = await mkdtemp(join(tmpdir(), 'postbox-bench-archive-'));
  const today = Math.floor(Date.now() / DAY_MS) * DAY_MS;
  let roles: PipelineRoles | null = null;
  try {
    await pastPartitions(db.sql, today);
    const consumerName = `bench_retention_${db.name.slice(-8)}`;
    await fillHistory(db.sql, { topic, perDay, payload: options.payload, today, consumerName });
    roles = await startRoles(db, {
      topic,
      partitions: options.partitions,
      relayThreads: report.relayThreads(),
      consumerThreads: defaultConsumerLimits.threads,
      batch: options.batch,
      label: 'retention',
      consumerName,
    });
    const live = new LiveLoad({ sql: db.sql, topic, payload: options.payload, consumerName, perSecond: loadPerSecond });
    const claimEvents = Math.max(5000, Math.floor(options.pipelineEvents / 2));
    // Once unmeasured, so that "before" is not the roles' start-up (JIT, pools, the first fetches).
    await measure(db.sql, live, 'warmup', Math.min(claimEvents, 2000), options.windowMs / 2);
    const before = await measure(db.sql, live, 'before', claimEvents, options.windowMs);
    const pruning = await pruneDays(db.sql, live, today, archiveDir, options.windowMs);
    const after = await measure(db.sql, live, 'after', claimEvents, options.windowMs);
    const result = {
      perDay,
      historyDays: HISTORY_DAYS,
      windowDays: WINDOW_DAYS,
      loadPerSecond,
      before,
      pruning,
      after,
    };
    report.results.scenarios.retention = result;
    addRows(report, result);
  } finally {
    await roles?.stop();
    await db.drop();
    await deleteTopics([topic]);
    await rm(archiveDir, { recursive: true, force: true });
  }
}

/**
 * Daily partitions for the HISTORY_DAYS days before today, as the installation's own maintenance would have made
 * them day by day (a fresh database has one empty legacy partition for everything before today instead).
 */
async function pastPartitions(sql: Sql, today: number): Promise<void> {
  for (const table of ['message_outbox', 'message_inbox']) {
    await sql`DROP TABLE ${sql(`${table}_p_legacy`)}`;
    for (let d = HISTORY_DAYS; d >= 1; d--) {
      const from = new Date(today - d * DAY_MS);
      const name = `${table}_p${from.toISOString().slice(0, 10).replaceAll('-', '')}`;
      // DDL takes no parameters: the bounds are read first, then written as literals (uuids, nothing to escape).
      const [b] = await sql<{ lo: string; hi: string }[]>`
        SELECT postbox_uuid_floor(${from})::text AS lo, postbox_uuid_floor(${new Date(from.getTime() + DAY_MS)})::text AS hi`;
      await sql.unsafe(`CREATE TABLE ${name} PARTITION OF ${table} FOR VALUES FROM ('${b!.lo}') TO ('${b!.hi}')`);
    }
  }
}

/** Each past day's traffic: `perDay` events published that day, and the consumer's inbox rows for them. */
async function fillHistory(
  sql: Sql,
  o: { topic: string; perDay: number; payload: number; today: number; consumerName: string },
): Promise<void> {
  const bar = progressBar(`fill ${HISTORY_DAYS} days × ${o.perDay.toLocaleString('en-US')} events`, HISTORY_DAYS);
  for (let d = HISTORY_DAYS; d >= 1; d--) {
    const day = new Date(o.today - d * DAY_MS + 3_600_000);
    const prefix = `h${d}`;
    await fillOutbox(sql, { topic: o.topic, events: o.perDay, payload: o.payload, prefix, idTime: day });
    await sql`
      INSERT INTO message_inbox (consumer_name, event_id, aggregate_id, aggregate_version, processed_at)
      SELECT ${o.consumerName}, event_id, aggregate_id, aggregate_version, published_at
      FROM message_outbox WHERE event_id >= postbox_uuid_floor(${day}) AND event_id < postbox_uuid_floor(${new Date(day.getTime() + DAY_MS - 3_600_000)})`;
    bar(HISTORY_DAYS - d + 1);
  }
  await sql`ANALYZE message_outbox`;
  await sql`ANALYZE message_inbox`;
}

/** The live producer: new orders at a fixed rate, their latency read from the projection. */
class LiveLoad {
  #next = 0;
  readonly sql: Sql;
  readonly waker: Waker;
  readonly topic: string;
  readonly payload: number;
  readonly consumerName: string;
  readonly perSecond: number;

  constructor(o: { sql: Sql; topic: string; payload: number; consumerName: string; perSecond: number }) {
    this.sql = o.sql;
    this.waker = createWaker(o.sql);
    this.topic = o.topic;
    this.payload = o.payload;
    this.consumerName = o.consumerName;
    this.perSecond = o.perSecond;
  }

  /** Runs the load for `ms` under `prefix` (orders `<prefix>-<n>`); returns the orders placed. */
  async run(prefix: string, ms: number): Promise<number> {
    const writer = engineOrderWriter(this.sql, this.waker, { topic: this.topic, payload: this.payload, prefix });
    const load = await openLoop(writer, this.perSecond, ms, MAX_IN_FLIGHT, this.#next);
    this.#next += load.offered + 1;
    return load.completed;
  }

  /** Waits until the consumer applied `events` orders of `prefix`, then their commit-to-applied percentiles. */
  async latency(prefix: string, events: number): Promise<Measurement['load']> {
    await until(
      async () => {
        const [row] = await this.sql<{ n: number }[]>`
          SELECT count(*)::int AS n FROM demo_order_projection WHERE order_id LIKE ${`${prefix}-%`}`;
        return row!.n >= events;
      },
      `the consumer to apply ${events} orders of ${prefix}`,
      600_000,
      200,
    );
    const p = await percentiles(this.sql, prefix);
    return { perSecond: this.perSecond, events, p50Ms: p.p50Ms, p99Ms: p.p99Ms };
  }
}

async function measure(sql: Sql, live: LiveLoad, label: string, claimEvents: number, windowMs: number) {
  const tables = Object.fromEntries(
    (await storageReport(sql)).map((t) => [t.table, { partitions: t.partitions, rows: t.rows, bytes: t.bytes }]),
  );
  const prefix = `claim${label}`;
  await fillOutbox(sql, { topic: live.topic, events: claimEvents, payload: live.payload, prefix });
  const started = performance.now();
  live.waker.wake();
  const bar = progressBar(`retention ${label}: relay claims ${claimEvents}`, claimEvents);
  await until(
    async () => {
      const left = await unpublished(sql);
      bar(claimEvents - left);
      return left === 0;
    },
    `the relay to publish the ${label} backlog`,
    600_000,
    100,
  );
  const claimPerSecond = claimEvents / ((performance.now() - started) / 1000);
  await untilInbox(sql, live.consumerName, prefix, claimEvents);
  const loadPrefix = `live${label}`;
  const placed = await live.run(loadPrefix, windowMs * 2);
  const load = await live.latency(loadPrefix, placed);
  return { tables, claimPerSecond, load } satisfies Measurement;
}

async function untilInbox(sql: Sql, consumer: string, prefix: string, n: number): Promise<void> {
  await until(
    async () => {
      const [row] = await sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM message_inbox WHERE consumer_name = ${consumer} AND aggregate_id LIKE ${`${prefix}-%`}
          AND processed_at > now() - interval '1 hour'`;
      return row!.n >= n;
    },
    `the consumer to take in ${n} events of ${prefix}`,
    600_000,
    250,
  );
}

/**
 * WINDOW_DAYS retention runs, each with its clock a day later (day k's clock puts the oldest remaining day past
 * the window), while the live load runs in windows until the last one finished.
 */
async function pruneDays(sql: Sql, live: LiveLoad, today: number, archiveDir: string, windowMs: number) {
  const policy = resolveRetentionPolicy({ archiveDir, outboxDays: WINDOW_DAYS, inboxDays: WINDOW_DAYS });
  const offsets = new KafkaOffsets(kafka);
  const runs: Array<{ seconds: number; dropped: number; rows: number }> = [];
  const bar = progressBar(`retention: ${WINDOW_DAYS} simulated days pruned under load`, WINDOW_DAYS);
  let done = false;
  const prefix = 'liveduring';
  const loading = (async () => {
    let placed = 0;
    while (!done) placed += await live.run(prefix, windowMs);
    return placed;
  })();
  const started = performance.now();
  try {
    for (let k = 1; k <= WINDOW_DAYS; k++) {
      const asOf = new Date(today + (k - HISTORY_DAYS + WINDOW_DAYS) * DAY_MS + 60_000);
      const t0 = performance.now();
      const r = await runRetention(sql, {
        policy,
        trigger: 'cli',
        actor: 'bench',
        now: asOf,
        brokerRetention: (topics) => offsets.retention(topics),
      });
      const dropped = r.partitions.filter((p) => p.outcome === 'dropped');
      runs.push({
        seconds: (performance.now() - t0) / 1000,
        dropped: dropped.length,
        rows: dropped.reduce((s, p) => s + p.rows, 0),
      });
      bar(k);
    }
  } finally {
    done = true;
    await offsets.close();
  }
  const seconds = (performance.now() - started) / 1000;
  const placed = await loading;
  const load = await live.latency(prefix, placed);
  return {
    runs: runs.length,
    seconds,
    partitionsDropped: runs.reduce((s, r) => s + r.dropped, 0),
    rowsArchived: runs.reduce((s, r) => s + r.rows, 0),
    slowestRunSeconds: Math.max(...runs.map((r) => r.seconds)),
    load,
  };
}

type RetentionResult = {
  perDay: number;
  loadPerSecond: number;
  before: Measurement;
  after: Measurement;
  pruning: Awaited<ReturnType<typeof pruneDays>>;
};

function addRows(report: Bench['report'], r: RetentionResult): void {
  const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;
  for (const table of ['message_outbox', 'message_inbox']) {
    const [a, b] = [r.before.tables[table]!, r.after.tables[table]!];
    report.row(
      'retention',
      `${table}: ${HISTORY_DAYS} → ${WINDOW_DAYS} days kept`,
      `${a.rows.toLocaleString('en-US')} → ${b.rows.toLocaleString('en-US')} rows, ${gib(a.bytes)} → ${gib(b.bytes)}`,
      [['before', a.bytes > 0 ? b.bytes / a.bytes : null]],
      `${a.partitions} → ${b.partitions} partitions (bytes after ÷ before)`,
    );
  }
  report.row(
    'retention',
    'relay claim rate, fresh backlog, before → after',
    `${rate(r.before.claimPerSecond)} → ${rate(r.after.claimPerSecond)}`,
    [['before', r.after.claimPerSecond / r.before.claimPerSecond]],
    'after ÷ before',
  );
  const p = r.pruning;
  report.row(
    'retention',
    `live load ${rate(r.loadPerSecond)}: p99 before / during pruning / after`,
    `${ms(r.before.load.p99Ms)} / ${ms(p.load.p99Ms)} / ${ms(r.after.load.p99Ms)}`,
    [['before', p.load.p99Ms / r.before.load.p99Ms]],
    `during ÷ before; p50 ${ms(r.before.load.p50Ms)} / ${ms(p.load.p50Ms)} / ${ms(r.after.load.p50Ms)}`,
  );
  report.row(
    'retention',
    `${p.runs} daily runs under load`,
    `${p.partitionsDropped} partitions, ${p.rowsArchived.toLocaleString('en-US')} rows archived and dropped in ${p.seconds.toFixed(1)} s`,
    [],
    `slowest run ${p.slowestRunSeconds.toFixed(1)} s`,
  );
}

const ms = (v: number) => `${v.toFixed(1)} ms`;
