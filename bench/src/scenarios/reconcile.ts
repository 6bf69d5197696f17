import { demoOrderSource, participants } from '@postbox/api/demo/reconcile';
import type { Sql } from '@postbox/engine';
import { BullmqRetryScheduler } from '@postbox/engine/bullmq';
import { CHECK_NAMES, type CheckName, type CheckRunReport, Reconciler } from '@postbox/engine/reconcile';
import type { RetryScheduler } from '@postbox/engine/runtime';
import type { Bench } from '../context.ts';
import { benchDatabase, progressBar, stack } from '../support.ts';

/** Aggregates broken per check that finds them: what each check must find, no more, no less. */
const BROKEN = 100;
const CONSUMER = 'bench-reconcile-view';
const TOPIC = 'bench.reconcile.orders';

interface CheckFigures {
  check: CheckName;
  status: CheckRunReport['status'];
  seconds: number;
  scanned: number;
  perSecond: number;
  /** Peak process RSS during the run, minus RSS just before it (MiB). */
  peakRssDeltaMiB: number;
  /** Peak V8 heap used during the run, minus heap used just before it (MiB). */
  peakHeapDeltaMiB: number;
  found: number;
  expected: number;
  error: string | null;
}

/**
 * Every reconciliation check, one after another in this process, over N demo orders (1M; quick 100k) that all
 * have their published outbox row and whose consumer applied them — except BROKEN orders whose outbox row is
 * missing (outbox-missing must find exactly those) and BROKEN others the consumer never applied
 * (consumer-behind: never_delivered). The other checks read their own tables (retry ledger, sagas, failure
 * store), empty here: their figures are the cost of a run over nothing. Per check: seconds, things scanned per
 * second, and memory: `process.memoryUsage()` sampled every 100 ms, peak minus the value before the run (RSS and
 * V8 heap), which shows whether a check's memory is bounded by its page rather than by the table.
 */
export async function reconcileScenario({ options, report }: Bench): Promise<void> {
  const n = options.reconcileAggregates;
  const db = await benchDatabase(4);
  const schedulers = new Map<string, RetryScheduler>();
  try {
    await fillOrders(db.sql, n, progressBar(`fill ${n.toLocaleString('en-US')} orders, outbox rows, inbox`, n));
    const expected = await breakSome(db.sql, n);
    await db.sql`ANALYZE`;
    const reconciler = new Reconciler({
      sql: db.sql,
      sources: [demoOrderSource({ topic: TOPIC, consumers: [CONSUMER] })],
      participants,
      schedulerFor: (consumer) => {
        let s = schedulers.get(consumer);
        if (!s) schedulers.set(consumer, (s = new BullmqRetryScheduler({ redisUrl: stack.REDIS_URL, consumer })));
        return s;
      },
    });
    const figures: CheckFigures[] = [];
    for (const check of CHECK_NAMES) figures.push(await measure(reconciler, check, expected[check] ?? 0));
    report.results.scenarios.reconcile = {
      aggregates: n,
      broken: BROKEN,
      allFound: figures.every((f) => f.found === f.expected),
      checks: figures,
    };
    for (const f of figures) {
      report.row(
        'reconcile',
        `${f.check}, ${n.toLocaleString('en-US')} orders`,
        f.status === 'finished'
          ? `${f.seconds.toFixed(1)} s, ${Math.round(f.perSecond).toLocaleString('en-US')} scanned/s`
          : `${f.status}${f.error ? `: ${f.error}` : ''}`,
        [],
        `scanned ${f.scanned.toLocaleString('en-US')}; peak RSS +${f.peakRssDeltaMiB.toFixed(0)} MiB, heap +${f.peakHeapDeltaMiB.toFixed(0)} MiB; found ${f.found} of ${f.expected}${f.found === f.expected ? '' : ' (MISMATCH)'}`,
      );
    }
  } finally {
    await Promise.all([...schedulers.values()].map((s) => s.close()));
    await db.drop();
  }
}

async function measure(reconciler: Reconciler, check: CheckName, expected: number): Promise<CheckFigures> {
  (globalThis as { gc?: () => void }).gc?.();
  const before = process.memoryUsage();
  let peakRss = before.rss;
  let peakHeap = before.heapUsed;
  const sampler = setInterval(() => {
    const m = process.memoryUsage();
    peakRss = Math.max(peakRss, m.rss);
    peakHeap = Math.max(peakHeap, m.heapUsed);
  }, 100);
  const started = performance.now();
  let r: CheckRunReport;
  try {
    r = await reconciler.run(check, { actor: 'bench' });
  } finally {
    clearInterval(sampler);
  }
  const seconds = (performance.now() - started) / 1000;
  const end = process.memoryUsage();
  const mib = (bytes: number) => Math.max(0, bytes) / 2 ** 20;
  return {
    check,
    status: r.status,
    seconds,
    scanned: r.counts.scanned,
    perSecond: seconds > 0 ? r.counts.scanned / seconds : 0,
    peakRssDeltaMiB: mib(Math.max(peakRss, end.rss) - before.rss),
    peakHeapDeltaMiB: mib(Math.max(peakHeap, end.heapUsed) - before.heapUsed),
    found: r.counts.found,
    expected,
    error: r.error,
  };
}

/**
 * N orders at version 1, each with its outbox row published an hour ago and the consumer's inbox at version 1:
 * set-based (INSERT … SELECT generate_series), 100,000 a statement. Order ids are zero-padded, so the source's
 * keyset pages follow insertion order.
 */
async function fillOrders(sql: Sql, n: number, progress: (done: number) => void): Promise<void> {
  const chunk = 100_000;
  for (let from = 0; from < n; from += chunk) {
    const to = Math.min(n, from + chunk) - 1;
    await sql.begin(async (tx) => {
      await tx`
        INSERT INTO demo_order (order_id, state, amount_cents, version)
        SELECT 'rc-' || lpad(i::text, 9, '0'), 'placed', 100 + i % 10000, 1 FROM generate_series(${from}::int, ${to}::int) AS i`;
      await tx`
        INSERT INTO message_outbox (event_id, event_type, schema_version, aggregate_id, aggregate_version, topic, payload,
                                    producer, occurred_at, status, published_at, created_at)
        SELECT gen_random_uuid(), 'OrderPlaced', 1, 'rc-' || lpad(i::text, 9, '0'), 1, ${TOPIC},
               convert_to('{"orderId":"rc-' || i || '"}', 'UTF8'), 'bench', now() - interval '1 hour', 'published',
               now() - interval '1 hour', now() - interval '1 hour'
        FROM generate_series(${from}::int, ${to}::int) AS i`;
      await tx`
        INSERT INTO consumer_aggregate_version (consumer_name, aggregate_id, last_version)
        SELECT ${CONSUMER}, 'rc-' || lpad(i::text, 9, '0'), 1 FROM generate_series(${from}::int, ${to}::int) AS i`;
    });
    progress(to + 1);
  }
}

/**
 * The breakages, spread over the table: BROKEN orders lose their outbox row (a code path that bypassed enqueue),
 * BROKEN others were never applied by the consumer (its group moved past them). Returns what each check must find.
 */
async function breakSome(sql: Sql, n: number): Promise<Partial<Record<CheckName, number>>> {
  const step = Math.floor(n / BROKEN);
  const ids = (offset: number) =>
    Array.from({ length: BROKEN }, (_, k) => `rc-${String(k * step + offset).padStart(9, '0')}`);
  await sql`DELETE FROM message_outbox WHERE aggregate_id = ANY(${ids(0)}::text[])`;
  await sql`DELETE FROM consumer_aggregate_version WHERE consumer_name = ${CONSUMER} AND aggregate_id = ANY(${ids(1)}::text[])`;
  return { 'outbox-missing': BROKEN, 'consumer-behind': BROKEN };
}
