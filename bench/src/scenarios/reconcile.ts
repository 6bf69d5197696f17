import { demoOrderSource, participants } from '@postbox/api/demo/reconcile';
import type { Sql } from '@postbox/engine';
import { BullmqRetryScheduler } from '@postbox/engine/bullmq';
import { CHECK_NAMES, type CheckName, type CheckRunReport, Reconciler } from '@postbox/engine/reconcile';
import type { RetryScheduler } from '@postbox/engine/runtime';
import type { Bench } from '../context.ts';
import { Redis } from 'ioredis';
import { benchDatabase, progressBar, stack, uniqueName } from '../support.ts';

/** Aggregates broken per check that finds them: what each check must find, no more, no less. */
const BROKEN = 100;
/** Scheduled retries whose job is in Redis (the healthy ones retry-job-missing looks up one by one). */
const LIVE_RETRIES = 1_000;
/** The consumer: its own name per run, so its BullMQ queue is this run's and is removed at the end. */
const CONSUMER = uniqueName('bench-reconcile-view');
/** The demo's fulfilment saga (its participants record their steps in the demo database) and its steps. */
const FULFILMENT_SAGA = participants[0]!.sagaType;
const STEPS = ['reserve', 'charge', 'ship'] as const;
const PARTICIPANT_OF: Record<(typeof STEPS)[number], string> = {
  reserve: 'inventory',
  charge: 'payments',
  ship: 'shipping',
};
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
 * Every reconciliation check, one after another in this process, over N demo orders (1M; quick 100k), each with
 * the history a busy installation keeps: its published outbox row and the consumer's inbox version, one
 * completed fulfilment saga with its three participant records, one retry ledger row (done) and one failure
 * (replayed); LIVE_RETRIES retries still scheduled, with their job in Redis. BROKEN aggregates are broken per
 * finding kind, the way production breaks them (see breakSome); each check must find exactly those. Per check:
 * seconds, things scanned per second, and memory: `process.memoryUsage()` sampled every 100 ms, peak minus the
 * value before the run (RSS and V8 heap), which shows whether a check's memory is bounded by its page rather
 * than by the table.
 */
export async function reconcileScenario({ options, report }: Bench): Promise<void> {
  const n = options.reconcileAggregates;
  const db = await benchDatabase(4);
  const schedulers = new Map<string, RetryScheduler>();
  try {
    const schedulerFor = (consumer: string) => {
      let s = schedulers.get(consumer);
      if (!s) schedulers.set(consumer, (s = new BullmqRetryScheduler({ redisUrl: stack.REDIS_URL, consumer })));
      return s;
    };
    const label = `fill ${n.toLocaleString('en-US')} orders and their history`;
    await fillOrders(db.sql, n, progressBar(label, n));
    await armLiveRetries(db.sql, schedulerFor(CONSUMER));
    const expected = await breakSome(db.sql, n);
    await db.sql`ANALYZE`;
    const reconciler = new Reconciler({
      sql: db.sql,
      sources: [demoOrderSource({ topic: TOPIC, consumers: [CONSUMER] })],
      participants,
      schedulerFor,
    });
    const figures: CheckFigures[] = [];
    for (const check of CHECK_NAMES) figures.push(await measure(reconciler, check, expected[check] ?? 0));
    report.results.scenarios.reconcile = {
      aggregates: n,
      broken: BROKEN,
      liveRetries: LIVE_RETRIES,
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
    await removeQueues([...schedulers.values()].map((s) => (s as BullmqRetryScheduler).queueName));
    await db.drop();
  }
}

/** Deletes this run's BullMQ queues (every key under `bull:<queue>:`), so no alarm outlives the bench. */
async function removeQueues(names: readonly string[]): Promise<void> {
  if (names.length === 0) return;
  const redis = new Redis(stack.REDIS_URL, { maxRetriesPerRequest: 1 });
  try {
    for (const name of names) {
      let cursor = '0';
      do {
        const [next, keys] = await redis.scan(cursor, 'MATCH', `bull:${name}:*`, 'COUNT', 1000);
        if (keys.length > 0) await redis.del(...keys);
        cursor = next;
      } while (cursor !== '0');
    }
  } finally {
    redis.disconnect();
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
 * N orders at version 1, each with its outbox row published an hour ago, the consumer's inbox at version 1, a
 * fulfilment saga completed an hour ago with its three participant records, a retry ledger row that is done and a
 * failure that was replayed: set-based (INSERT … SELECT generate_series), 100,000 orders a transaction. Order ids
 * are zero-padded, so the source's keyset pages follow insertion order; saga ids are derived from the order id.
 */
async function fillOrders(sql: Sql, n: number, progress: (done: number) => void): Promise<void> {
  await sql`
    INSERT INTO saga_definition (saga_type, version, shape_hash, steps)
    VALUES (${FULFILMENT_SAGA}, 1, 'bench', ${[...STEPS]}::text[]) ON CONFLICT DO NOTHING`;
  const chunk = 100_000;
  for (let from = 0; from < n; from += chunk) {
    const to = Math.min(n, from + chunk) - 1;
    await sql.begin(async (tx) => {
      const range = tx`generate_series(${from}::int, ${to}::int) AS i`;
      await tx`
        INSERT INTO demo_order (order_id, state, amount_cents, version)
        SELECT 'rc-' || lpad(i::text, 9, '0'), 'placed', 100 + i % 10000, 1 FROM ${range}`;
      await tx`
        INSERT INTO message_outbox (event_id, event_type, schema_version, aggregate_id, aggregate_version, topic, payload,
                                    producer, occurred_at, status, published_at, created_at)
        SELECT gen_random_uuid(), 'OrderPlaced', 1, 'rc-' || lpad(i::text, 9, '0'), 1, ${TOPIC},
               convert_to('{"orderId":"rc-' || i || '"}', 'UTF8'), 'bench', now() - interval '1 hour', 'published',
               now() - interval '1 hour', now() - interval '1 hour'
        FROM ${range}`;
      await tx`
        INSERT INTO consumer_aggregate_version (consumer_name, aggregate_id, last_version)
        SELECT ${CONSUMER}, 'rc-' || lpad(i::text, 9, '0'), 1 FROM ${range}`;
      await tx`
        INSERT INTO saga_instance (saga_id, saga_type, definition_version, business_key, status, step, direction,
                                   attempt, version, data, steps, sends, pivot_passed, created_at, updated_at)
        SELECT md5('rc-' || lpad(i::text, 9, '0'))::uuid, ${FULFILMENT_SAGA}, 1, 'rc-' || lpad(i::text, 9, '0'), 'completed', 3, 'forward', 1, 4, '{}'::jsonb,
               '{succeeded,succeeded,succeeded}', '{1,1,1}', true, now() - interval '1 hour', now() - interval '1 hour'
        FROM ${range}`;
      await tx`
        INSERT INTO saga_participation (participant, step_key, status, updated_at)
        SELECT p.participant, md5('rc-' || lpad(i::text, 9, '0'))::uuid::text || ':' || p.step, 'applied', now() - interval '1 hour'
        FROM ${range}, unnest(${Object.keys(PARTICIPANT_OF)}::text[], ${Object.values(PARTICIPANT_OF)}::text[])
             AS p(step, participant)`;
      await tx`
        INSERT INTO message_retry (consumer_name, event_id, aggregate_id, aggregate_version, topic, record, attempt,
                                   next_attempt_at, first_failed_at, last_error_code, last_error, status, updated_at)
        SELECT ${CONSUMER}, gen_random_uuid(), 'rc-' || lpad(i::text, 9, '0'), 1, ${TOPIC}, '{}'::jsonb, 2, now() - interval '1 hour',
               now() - interval '2 hours', 'ECONNRESET', 'bench', 'done', now() - interval '1 hour'
        FROM ${range}`;
      await tx`
        INSERT INTO message_failure (consumer_name, event_id, event_type, aggregate_id, aggregate_version, topic,
                                     error_code, error_detail, attempts, first_failed_at, last_failed_at, status,
                                     replayed_at)
        SELECT ${CONSUMER}, gen_random_uuid(), 'OrderPlaced', 'rc-' || lpad(i::text, 9, '0'), 1, ${TOPIC}, 'HANDLER_ERROR', 'bench', 3,
               now() - interval '3 days', now() - interval '3 days', 'replayed', now() - interval '2 days'
        FROM ${range}`;
    });
    progress(to + 1);
  }
}

/**
 * LIVE_RETRIES retries of the consumer still scheduled (due in an hour), each with its alarm in Redis: the healthy
 * rows retry-job-missing looks up and must not report.
 */
async function armLiveRetries(sql: Sql, scheduler: RetryScheduler): Promise<void> {
  const rows = await sql<{ event_id: string; next_attempt_at: Date }[]>`
    INSERT INTO message_retry (consumer_name, event_id, aggregate_id, aggregate_version, topic, record, attempt,
                               next_attempt_at, first_failed_at, last_error_code, last_error, updated_at)
    SELECT ${CONSUMER}, gen_random_uuid(), 'rc-live-' || i, 1, ${TOPIC}, '{}'::jsonb, 1, now() + interval '1 hour',
           now() - interval '1 hour', 'ECONNRESET', 'bench', now() - interval '1 hour'
    FROM generate_series(1, ${LIVE_RETRIES}::int) AS i
    RETURNING event_id::text, next_attempt_at`;
  const jobs = rows.map((r) => ({
    consumer: CONSUMER,
    eventId: r.event_id,
    attempt: 1,
    dueAt: r.next_attempt_at.getTime(),
  }));
  for (let k = 0; k < jobs.length; k += 100)
    await Promise.all(jobs.slice(k, k + 100).map((j) => scheduler.schedule(j)));
}

/**
 * The breakages, BROKEN of each, on different aggregates spread over the table (offset k of every N/BROKEN-th):
 * 0 lost its outbox row (a code path that bypassed enqueue); 1 was never applied by the consumer (its group moved
 * past it); 2 has a scheduled retry whose job Redis lost; 3's saga waits for a reply whose timeout never fired
 * (no timer runner); 4's saga froze in needs_attention two days ago; 5's saga completed though its participant has
 * no record of the charge; 6 has a failure open for two days; 7 has versions 3 and 4 parked for two days (version
 * 2 never came). Returns what each check must find.
 */
async function breakSome(sql: Sql, n: number): Promise<Partial<Record<CheckName, number>>> {
  const step = Math.floor(n / BROKEN);
  const ids = (offset: number) =>
    Array.from({ length: BROKEN }, (_, k) => `rc-${String(k * step + offset).padStart(9, '0')}`);
  await sql`DELETE FROM message_outbox WHERE aggregate_id = ANY(${ids(0)}::text[])`;
  await sql`DELETE FROM consumer_aggregate_version WHERE consumer_name = ${CONSUMER} AND aggregate_id = ANY(${ids(1)}::text[])`;
  await sql`
    UPDATE message_retry SET status = 'scheduled', attempt = 3, next_attempt_at = now() - interval '10 minutes',
                             updated_at = now() - interval '20 minutes'
    WHERE consumer_name = ${CONSUMER} AND aggregate_id = ANY(${ids(2)}::text[])`;
  await sql`
    UPDATE saga_instance SET status = 'running', step = 1, version = 2, steps = '{succeeded,running,pending}',
                             pivot_passed = false, due_at = now() - interval '30 minutes', updated_at = now() - interval '40 minutes'
    WHERE business_key = ANY(${ids(3)}::text[])`;
  await sql`
    DELETE FROM saga_participation
    WHERE step_key IN (SELECT saga_id::text || ':' || s FROM saga_instance, unnest('{charge,ship}'::text[]) AS s
                       WHERE business_key = ANY(${ids(3)}::text[]))`;
  await sql`
    UPDATE saga_instance SET status = 'needs_attention', attention_reason = 'compensation_refused',
                             updated_at = now() - interval '2 days'
    WHERE business_key = ANY(${ids(4)}::text[])`;
  await sql`
    DELETE FROM saga_participation
    WHERE step_key IN (SELECT saga_id::text || ':charge' FROM saga_instance WHERE business_key = ANY(${ids(5)}::text[]))`;
  await sql`
    UPDATE message_failure SET status = 'open', replayed_at = NULL, first_failed_at = now() - interval '2 days',
                               last_failed_at = now() - interval '2 days'
    WHERE consumer_name = ${CONSUMER} AND aggregate_id = ANY(${ids(6)}::text[])`;
  await sql`
    INSERT INTO message_parked (consumer_name, aggregate_id, aggregate_version, event_id, topic, record,
                                expected_version, parked_at)
    SELECT ${CONSUMER}, a, v, gen_random_uuid(), ${TOPIC}, '{}'::jsonb, 2, now() - interval '2 days'
    FROM unnest(${ids(7)}::text[]) AS a, generate_series(3, 4) AS v`;
  return {
    'outbox-missing': BROKEN,
    'consumer-behind': BROKEN,
    'retry-job-missing': BROKEN,
    'saga-timer-unfired': BROKEN,
    'saga-overdue': BROKEN,
    'saga-step-mismatch': BROKEN,
    'stale-failures': 2 * BROKEN,
  };
}
