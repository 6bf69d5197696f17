import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchDatabase, perSecond, progressBar, type BenchDatabase } from '../support.ts';

/**
 * The raw claim + mark cycle with the seed's SQL (the source article's table, ready index and claim; docs/design.md §5), batch 500,
 * 4 claimers, no publishing: claim in a short transaction (FOR UPDATE SKIP LOCKED), then mark the batch
 * published with one UPDATE … WHERE event_id = ANY($1). Two UPDATEs per event: the ceiling of the per-row
 * design on this machine. Measured twice: ordered by (available_at, created_at), the order the seed's partial
 * index serves, until the table is drained; and by created_at alone, the seed's literal ORDER BY, for one window.
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
    report.row(
      'baseline',
      `raw claim + mark (seed SQL, batch ${options.batch}, 4 claimers)`,
      rate(indexed.rate),
      [],
      'ORDER BY available_at, created_at (the index order)',
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
): Promise<{ rows: number; seconds: number; rate: number }> {
  const bar = progressBar(`raw claim + mark, ${order.replace('ORDER BY ', 'by ')}`, windowMs ?? events);
  let rows = 0;
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
  return { rows, seconds, rate: perSecond(rows, seconds) };
}
