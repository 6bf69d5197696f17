import { createWaker, transaction, type Sql, type Waker } from '@postbox/engine';
import type { Consumer } from '@postbox/engine/runtime';
import { SagaTimerRunner, type SagaDefinition, type SagaOrchestrator } from '@postbox/engine/saga';
import type { Bench } from '../context.ts';
import { ratio } from '../report.ts';
import { benchDatabase, benchTopic, deleteTopics, perSecond, progressBar, uniqueName, until } from '../support.ts';
import { openLoop, placeOrders, type OrderWriter } from '../workload/business.ts';
import { startConsumer } from '../workload/pipeline.ts';
import { spawnRelay } from '../workload/processes.ts';
import type { SagaTopics } from '../workload/saga-flow.ts';

/** Six events per saga: three commands, three replies. */
const EVENTS_PER_SAGA = 6;
const MAX_IN_FLIGHT = 64;
const PRODUCERS = 16;

/**
 * Three-step sagas (reserve → charge → ship, each applied by a participant consumer through participant(), the
 * replies applied by the orchestrator's reply consumer) through a `postbox relay` process and Kafka, beside the
 * e2e events/s measured in the same run: a saga moves six events, so sagas/s × 6 ÷ e2e events/s is what the saga
 * layer (its row, history, per-step records, one transaction per transition) costs against plain events. Then
 * open-loop starts at half that rate: start commit → completing transition, p50/p99, from the database clock
 * (saga created_at, now() of the starting transaction → updated_at, now() of the transition that completed it).
 */
export async function sagaScenario({ options, report }: Bench): Promise<void> {
  const e2e = report.results.scenarios.e2e?.eventsPerSecond as number | undefined;
  if (!e2e) throw new Error('bench: saga needs the e2e figure of the same run; run it with e2e (saga and all do)');
  const relayThreads = report.relayThreads();
  const sagas = Math.max(200, Math.round(options.pipelineEvents / EVENTS_PER_SAGA));
  const db = await benchDatabase(MAX_IN_FLIGHT);
  const prefix = uniqueName('bench-saga');
  const topic = (role: string) => benchTopic(`saga-${role}`, options.partitions);
  const named: SagaTopics = {
    inventory: await topic('inventory'),
    payments: await topic('payments'),
    shipping: await topic('shipping'),
    replies: await topic('replies'),
  };
  const topics = Object.values(named);
  // Read by saga-flow.ts, here and in the consumers' worker threads (they inherit the environment).
  process.env.POSTBOX_BENCH_SAGA_TOPICS = JSON.stringify(named);
  const { benchOrchestrator, benchSaga, sagaTopics } = await import('../workload/saga-flow.ts');
  await db.sql`CREATE TABLE bench_saga_effect (role text NOT NULL, order_id text NOT NULL)`;
  const relay = spawnRelay({
    databaseUrl: db.url,
    topic: topics,
    partitions: options.partitions,
    threads: relayThreads,
    batch: options.batch,
    label: 'saga relay',
  });
  const consumers: Consumer[] = [];
  const timers = new SagaTimerRunner(db.sql, benchOrchestrator);
  try {
    const participant = (role: string) =>
      new URL(`../workload/saga-participant.handler.ts?role=${role}`, import.meta.url);
    for (const [role, topic, handler] of [
      ['reserve', sagaTopics.inventory, participant('reserve')],
      ['charge', sagaTopics.payments, participant('charge')],
      ['ship', sagaTopics.shipping, participant('ship')],
      ['replies', sagaTopics.replies, new URL('../workload/saga-replies.handler.ts', import.meta.url)],
    ] as const) {
      consumers.push(await startConsumer(db, { name: `${prefix}-${role}`, topic, threads: 1, handler }));
    }
    await benchOrchestrator.register(db.sql);
    timers.start();
    const waker = createWaker(db.sql);
    const writer = (tag: string): OrderWriter => ({
      place: (n) => startSaga(db.sql, waker, benchOrchestrator, benchSaga, `${tag}-${n}`).then(() => undefined),
    });
    await writer('warm').place(0);
    await untilCompleted(db.sql, 1, 120_000);

    const bar = progressBar(`saga throughput (${PRODUCERS} starters)`, sagas);
    const watch = setInterval(() => void completed(db.sql).then((n) => bar(Math.max(0, n - 1))), 500);
    await placeOrders(writer('run'), sagas, PRODUCERS).catch((e: unknown) => {
      clearInterval(watch);
      throw e;
    });
    await untilCompleted(db.sql, sagas + 1, 600_000).finally(() => clearInterval(watch));
    bar(sagas);
    const [clock] = await db.sql<{ seconds: number }[]>`
      SELECT extract(epoch FROM max(updated_at) - min(created_at))::float8 AS seconds
      FROM saga_instance WHERE business_key LIKE 'run-%'`;
    const sagasPerSecond = perSecond(sagas, clock!.seconds);

    // Latency at half the measured maximum, open loop (arrivals do not wait for earlier sagas).
    const offered = sagasPerSecond / 2;
    const load = await openLoop(writer('lat'), offered, options.windowMs * 2, MAX_IN_FLIGHT, 0);
    await untilCompleted(db.sql, sagas + 1 + load.completed, 600_000);
    const [lat] = await db.sql<{ p50: number; p99: number; max: number; n: number }[]>`
      SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::float8 AS p50,
             percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::float8 AS p99, max(ms)::float8 AS max, count(*)::int AS n
      FROM (SELECT extract(epoch FROM updated_at - created_at) * 1000 AS ms
            FROM saga_instance WHERE business_key LIKE 'lat-%') l`;
    const [effects] = await db.sql<{ n: number; distinct: number }[]>`
      SELECT count(*)::int AS n, count(DISTINCT (role, order_id))::int AS distinct FROM bench_saga_effect`;
    if (effects!.n !== effects!.distinct)
      throw new Error(`bench: ${effects!.n - effects!.distinct} saga steps applied twice`);

    const eventRate = sagasPerSecond * EVENTS_PER_SAGA;
    report.results.scenarios.saga = {
      sagasPerSecond,
      eventsPerSecond: eventRate,
      ratioToE2e: ratio(eventRate, e2e),
      sagas,
      seconds: clock!.seconds,
      latency: {
        offeredPerSecond: offered,
        sagas: lat!.n,
        shed: load.shed,
        p50Ms: lat!.p50,
        p99Ms: lat!.p99,
        maxMs: lat!.max,
      },
      relayThreads,
    };
    report.row(
      'saga',
      `saga: completed three-step sagas (${PRODUCERS} starters)`,
      `${Math.round(sagasPerSecond).toLocaleString('en-US')} sagas/s`,
      [['e2e events/s (same run)', ratio(eventRate, e2e)]],
      `= ${Math.round(eventRate).toLocaleString('en-US')} ev/s (6 per saga); start → completed, DB clock`,
    );
    report.row(
      'saga',
      `saga start commit → completed, at ${Math.round(offered)} sagas/s (open loop)`,
      `p50 ${lat!.p50.toFixed(0)} ms`,
      [],
      `p99 ${lat!.p99.toFixed(0)} ms, max ${lat!.max.toFixed(0)} ms over ${lat!.n} sagas; ${load.shed} starts shed`,
    );
  } finally {
    await timers.stop();
    await Promise.all(consumers.map((c) => c.stop()));
    await relay.stop();
    await db.drop();
    await deleteTopics(topics);
  }
}

function startSaga(
  sql: Sql,
  waker: Waker,
  orchestrator: SagaOrchestrator,
  definition: SagaDefinition<{ orderId: string }>,
  orderId: string,
) {
  return transaction(sql, waker, (tx) =>
    orchestrator.start(tx, definition, { businessKey: orderId, data: { orderId } }),
  );
}

async function completed(sql: Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM saga_instance WHERE status = 'completed'`;
  return row!.n;
}

async function untilCompleted(sql: Sql, n: number, timeoutMs: number): Promise<void> {
  await until(async () => (await completed(sql)) >= n, `${n} sagas to complete`, timeoutMs, 200);
}
