import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchDatabase, perSecond, progressBar, type BenchDatabase } from '../support.ts';
import { startCpuMeter } from '../workload/cpu.ts';

/**
 * The raw claim + mark cycle with the seed's SQL (the source article's table, ready index and claim; docs/design.md §5), batch 500,
 * 4 claimers, no publishing: claim in a short transaction (FOR UPDATE SKIP LOCKED), then mark the batch
 * published with one UPDATE … WHERE event_id = ANY($1). Two UPDATEs per event: the ceiling of the per-row
 * design on this machine. Measured twice: ordered by (available_at, created_at), the order the seed's partial
 * index serves, until the table is drained; and by created_at alone, the seed's literal ORDER BY, for one window.
 * Then the read + mark Postbox runs (one UPDATE per event) on the same table and rows, drained to the end. The
 * machine's CPU and the WAL per event say what each costs the database.
 */
export async function claimMarkBaseline({ options, report }: Bench): Promise<void> {
  const db = await benchDatabase(8);
  try {
    await createSeedTable(db);
    await fillSeed(db, options.events, options.payload);
    const indexed = await cycle(db, 'ORDER BY available_at, created_at', options.events, options.batch, null);
    await db.sql`TRUNCATE seed_outbox`;
    await fillSeed(db, options.events, options.payload);
    const literal = await cycle(db, 'ORDER BY created_at', options.events, options.batch, options.windowMs);
    await db.sql`TRUNCATE seed_outbox`;
    await fillSeed(db, options.events, options.payload);
    const readMark = await readMarkCycle(db, options.events, options.batch);
    report.results.baselines.claimMark = {
      eventsPerSecond: indexed.rate,
      events: indexed.rows,
      seconds: indexed.seconds,
      batch: options.batch,
      claimers: 4,
      order: 'available_at, created_at',
    };
    report.results.baselines.claimMarkCreatedAtOrder = {
      eventsPerSecond: literal.rate,
      events: literal.rows,
      seconds: literal.seconds,
      batch: options.batch,
      claimers: 4,
      order: 'created_at',
    };
    report.results.baselines.readMark = {
      eventsPerSecond: readMark.rate,
      events: readMark.rows,
      seconds: readMark.seconds,
      batch: options.batch,
      claimers: 4,
      machineCpuMicrosecondsPerEvent: readMark.machineUs,
      walBytesPerEvent: readMark.walBytes,
      indexedMachineCpuMicrosecondsPerEvent: indexed.machineUs,
      indexedWalBytesPerEvent: indexed.walBytes,
    };
    report.row(
      'baseline',
      `raw claim + mark (seed SQL, batch ${options.batch}, 4 claimers)`,
      rate(indexed.rate),
      [],
      `ORDER BY available_at, created_at (the index order); machine CPU ${Math.round(indexed.machineUs)} µs, WAL ${Math.round(indexed.walBytes)} B per event`,
    );
    report.row(
      'baseline',
      'raw read + mark (a SELECT per batch, one UPDATE per event)',
      rate(readMark.rate),
      [],
      `each claimer owns a quarter of the rows, as a relay owns its lanes; machine CPU ${Math.round(readMark.machineUs)} µs, WAL ${Math.round(readMark.walBytes)} B per event`,
    );
    report.row(
      'baseline',
      'raw claim + mark, ORDER BY created_at alone',
      rate(literal.rate),
      [],
      'the seed literal ORDER BY',
    );
  } finally {
    await db.drop();
  }
}

/** The seed's table and index (docs/design.md §5), in the bench's own database: not Postbox's schema. */
async function createSeedTable(db: BenchDatabase): Promise<void> {
  await db.sql`
    CREATE TABLE seed_outbox (
      event_id uuid PRIMARY KEY,
      aggregate_id text NOT NULL,
      aggregate_version bigint NOT NULL,
      topic text NOT NULL,
      payload jsonb NOT NULL,
      status text NOT NULL CHECK (status IN ('pending', 'publishing', 'published', 'failed')),
      attempts integer NOT NULL DEFAULT 0,
      available_at timestamptz NOT NULL DEFAULT now(),
      lease_until timestamptz,
      published_at timestamptz,
      last_error text,
      created_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (aggregate_id, aggregate_version)
    )`;
  await db.sql`CREATE INDEX seed_outbox_ready_idx ON seed_outbox (available_at, created_at) WHERE status IN ('pending', 'publishing')`;
}

/** Rows as individual commits would leave them: distinct, increasing created_at (clock_timestamp per row). */
async function fillSeed(db: BenchDatabase, events: number, payload: number): Promise<void> {
  const aggregates = Math.max(1, Math.floor(events / 10));
  await db.sql`
    INSERT INTO seed_outbox (event_id, aggregate_id, aggregate_version, topic, payload, status, available_at, created_at)
    SELECT gen_random_uuid(), 'a-' || (i % ${aggregates}), i / ${aggregates} + 1, 'bench',
           jsonb_build_object('pad', repeat('x', ${Math.max(0, payload - 10)})), 'pending', c, c
    FROM generate_series(0, ${events - 1}::int) AS i, LATERAL (SELECT clock_timestamp() + i * interval '0 s' AS c) AS t`;
  await db.sql`VACUUM ANALYZE seed_outbox`;
}

async function cycle(
  db: BenchDatabase,
  order: string,
  events: number,
  batch: number,
  windowMs: number | null,
): Promise<CycleRun> {
  const bar = progressBar(`raw claim + mark, ${order.replace('ORDER BY ', 'by ')}`, windowMs ?? events);
  let rows = 0;
  const meter = await startMeter(db);
  const started = performance.now();
  const deadline = windowMs === null ? Infinity : started + windowMs;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (performance.now() < deadline) {
        const claimed = await db.sql.unsafe<{ event_id: string }[]>(
          `WITH picked AS (
             SELECT event_id FROM seed_outbox
             WHERE (status = 'pending' OR (status = 'publishing' AND lease_until < now())) AND available_at <= now()
             ${order}
             FOR UPDATE SKIP LOCKED
             LIMIT $1
           )
           UPDATE seed_outbox AS o SET status = 'publishing', lease_until = now() + interval '30 seconds', attempts = attempts + 1
           FROM picked WHERE o.event_id = picked.event_id
           RETURNING o.event_id, o.topic, o.payload, o.attempts`,
          [batch],
        );
        if (claimed.length === 0) break;
        await db.sql`UPDATE seed_outbox SET status = 'published', published_at = now(), lease_until = NULL WHERE event_id = ANY(${claimed.map((r) => r.event_id)}::uuid[])`;
        rows += claimed.length;
        bar(windowMs === null ? rows : Math.min(windowMs, Math.round(performance.now() - started)));
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  bar(windowMs ?? events);
  return { rows, seconds, rate: perSecond(rows, seconds), ...(await meter.perEvent(rows)) };
}

interface CycleRun {
  rows: number;
  seconds: number;
  rate: number;
  /** The machine's busy CPU per row (PostgreSQL's work, mostly, with no publishing), and the WAL written per row. */
  machineUs: number;
  walBytes: number;
}

async function startMeter(db: BenchDatabase) {
  const [wal] = await db.sql<{ lsn: string }[]>`SELECT pg_current_wal_lsn()::text AS lsn`;
  const cpu = startCpuMeter({});
  return {
    async perEvent(rows: number): Promise<{ machineUs: number; walBytes: number }> {
      const machineUs = cpu.perEvent(rows).machine;
      const [d] = await db.sql<
        { bytes: number }[]
      >`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), ${wal!.lsn}::pg_lsn)::float8 AS bytes`;
      return { machineUs, walBytes: rows > 0 ? d!.bytes / rows : 0 };
    },
  };
}

/**
 * The claim Postbox runs since migration 0014, on the seed's table: each of 4 claimers owns a quarter of the rows
 * (as a relay owns its lanes, so no row lock is needed to keep two claimers apart) and reads its head with a plain
 * SELECT; the mark is the one UPDATE per event. Drained to the end.
 */
async function readMarkCycle(db: BenchDatabase, events: number, batch: number): Promise<CycleRun> {
  await db.sql`CREATE INDEX seed_outbox_quarter_idx ON seed_outbox ((hashtext(aggregate_id) & 3), available_at, created_at)
               WHERE status IN ('pending', 'publishing')`;
  await db.sql`ANALYZE seed_outbox`;
  const bar = progressBar('raw read + mark', events);
  let rows = 0;
  const meter = await startMeter(db);
  const started = performance.now();
  await Promise.all(
    Array.from({ length: 4 }, async (_, quarter) => {
      for (;;) {
        const read = await db.sql<{ event_id: string }[]>`
          SELECT event_id, topic, payload, attempts FROM seed_outbox
          WHERE (hashtext(aggregate_id) & 3) = ${quarter} AND status = 'pending' AND available_at <= now()
          ORDER BY available_at, created_at
          LIMIT ${batch}`;
        if (read.length === 0) break;
        await db.sql`UPDATE seed_outbox SET status = 'published', published_at = now(), attempts = attempts + 1
                     WHERE event_id = ANY(${read.map((r) => r.event_id)}::uuid[])`;
        rows += read.length;
        bar(rows);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  bar(events);
  return { rows, seconds, rate: perSecond(rows, seconds), ...(await meter.perEvent(rows)) };
}
