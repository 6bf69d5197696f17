import { appendFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { formatReport, totals, type VerifyReport } from '@postbox/engine/verify';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { createNetns, type Netns } from '../support/netns.ts';
import { Pipeline, stopGracefully } from '../support/pipeline.ts';
import { createPrivateTopic, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import {
  checkTimes,
  describePlan,
  FAULT_KINDS,
  formatSeed,
  parseSeed,
  plan,
  ROLES,
  SINGLE_BROKER_KINDS,
  type FaultKind,
  type PlannedFault,
} from './support/fault-schedule.ts';
import { SoakFaults, type RoleSlot } from './support/soak-faults.ts';

// The soak (`npm run test:faults -- --mix [--minutes M] [--seed N]`): the whole chain under steady load while a
// seeded schedule (support/fault-schedule.ts) injects, one or two at a time, every fault the suite knows — kills,
// stops, silent, loud and one-way partitions between each role and each service (every role in its own network
// namespace), broker kills and stops, PostgreSQL stopped, Redis killed or wiped, rebalances, failures replayed.
// Every five minutes (after a quiet minute) the verifier checks that nothing was lost, applied twice or reordered;
// at the end everything is healed, drained and checked finally. Runs only with POSTBOX_FAULT_MIX=1.
//
// `brokers` is the hook for the three-broker cluster (POSTBOX_FAULT_MIX_BROKERS=3): its kinds (leader kill,
// broker partition, two brokers down, rolling restart) are planned then, once the cluster listens on the bridge.

const MIX = process.env.POSTBOX_FAULT_MIX === '1';
const MINUTES = Number(process.env.POSTBOX_FAULT_MINUTES ?? 30);
const BROKERS = Number(process.env.POSTBOX_FAULT_MIX_BROKERS ?? 1);
const PARTITIONS = 4;
const RATE = 40;
const DRAIN_MS = 300_000;

interface SoakOptions {
  minutes: number;
  seed: bigint;
  /** 1: the private broker; 3: the private cluster (not wired to the bridge yet). */
  brokers: 1 | 3;
}

function options(): SoakOptions {
  if (!(MINUTES > 0))
    throw new Error(`POSTBOX_FAULT_MINUTES must be minutes > 0, got ${process.env.POSTBOX_FAULT_MINUTES}`);
  if (BROKERS !== 1 && BROKERS !== 3) throw new Error(`POSTBOX_FAULT_MIX_BROKERS is 1 or 3, got ${BROKERS}`);
  const seed = process.env.POSTBOX_FAULT_SEED
    ? parseSeed(process.env.POSTBOX_FAULT_SEED)
    : BigInt(`0x${randomBytes(8).toString('hex')}`);
  return { minutes: MINUTES, seed, brokers: BROKERS };
}

const stuckOf = (r: VerifyReport) =>
  r.log.stuck.expiredLeases.count +
  r.log.stuck.overduePending.count +
  r.consumers.reduce((s, c) => s + c.stuck.overdueRetries.count + c.stuck.parkedGaps.count, 0);

// Defined only when asked for (npm run test:faults -- --mix): `npm test` shows nothing skipped.
if (MIX)
  test(`soak: ${MINUTES} min of mixed faults under ${RATE} events/s, checked every 5 min and at the end`, {
    timeout: MINUTES * 60_000 + 1_200_000,
  }, async () => {
    const o = options();
    console.log(`# soak seed ${formatSeed(o.seed)}`);
    const kinds: FaultKind[] = o.brokers === 3 ? FAULT_KINDS : SINGLE_BROKER_KINDS;
    const faults = plan(o.seed, o.minutes, kinds);
    const checks = checkTimes(o.minutes).map((t) => `${t / 60_000} min`);
    console.log(
      `# soak plan: ${faults.length} faults in ${o.minutes} min; checks ${checks.length ? `at ${checks.join(', ')} and ` : ''}at the end`,
    );
    for (const line of describePlan(faults)) console.log(`#   ${line}`);

    if (o.brokers === 3)
      throw new Error('the three-broker soak needs the private cluster listening on the test bridge (a host option)');
    let netns: Netns | undefined;
    let stack: PrivateStack | undefined;
    let db: TestDatabase | undefined;
    let p: Pipeline | undefined;
    let injector: SoakFaults | undefined;
    try {
      netns = await createNetns([...ROLES, 'c3']);
      stack = await startPrivateStack({ host: netns.host, postgres: {}, redis: true, kafka: {} });
      db = await freshDatabase('pbmix', stack.urls.DATABASE_URL!);
      const topic = uniqueTopic('mix');
      await createPrivateTopic(stack, topic, PARTITIONS);
      const consumer = `mix${topic.slice(-6)}`;
      p = new Pipeline({
        databaseUrl: db.url,
        kafkaBrokers: stack.urls.KAFKA_BROKERS!,
        redisUrl: stack.urls.REDIS_URL!,
        topic,
        partitions: PARTITIONS,
        consumer,
        // The test bridge is a private network with no route out; PostgreSQL's password crosses it in clear.
        env: { POSTBOX_ALLOW_INSECURE: 'postgres' },
      });
      await p.setup();
      const pipeline = p;
      const ns = netns;
      const starts: Record<string, () => ReturnType<Pipeline['writer']>> = {
        w: () =>
          pipeline.writer({ WRITER_RATE: String(RATE), WRITER_AGGREGATES: '100', WRITER_FLAKY: '0.02' }, ns.name('w')),
        r1: () => pipeline.relay({ POSTBOX_RELAY_THREADS: '1' }, ns.name('r1')),
        r2: () => pipeline.relay({}, ns.name('r2')),
        c1: () => pipeline.consumer({}, ns.name('c1')),
        c2: () => pipeline.consumer({}, ns.name('c2')),
      };
      const roles = new Map(
        ROLES.map((role) => [role, { role, start: starts[role]!, current: starts[role]!(), down: false } as RoleSlot]),
      );
      const inject = (injector = new SoakFaults({ netns, stack, p, roles, prefix: consumer }));
      await sleep(10_000);
      inject.assertAlive('while warming up');

      const injected = await runTimeline(inject, faults, o.minutes, () => checkMidRun(pipeline));

      await inject.healAll();
      await sleep(5000);
      inject.assertAlive('after the heal');
      const writer = roles.get('w')!;
      await stopGracefully(writer.current, 'writer', 'writer started');
      writer.down = true;
      const report = await drain(pipeline, inject);
      inject.assertAlive('after the drain');
      const t = totals(report);
      const stuck = stuckOf(report);
      const counts = FAULT_KINDS.filter((k) => kinds.includes(k))
        .map((k) => `${k}=${injected[k] ?? 0}`)
        .join(', ');
      const line =
        `soak: seed ${formatSeed(o.seed)}, ${o.minutes} min, faults ${counts}; events ${t.events}, ${t.lost} lost, ` +
        `${t.appliedTwice} applied twice, ${t.reordered} reordered, ${stuck} stuck; ${t.duplicatesAbsorbed} duplicates absorbed, ` +
        `${report.log.duplicates} duplicate sends, ${inject.replays.length} replay runs`;
      console.log(line);
      if (process.env.POSTBOX_FAULT_SUMMARY)
        appendFileSync(
          process.env.POSTBOX_FAULT_SUMMARY,
          `${JSON.stringify({ scenario: 'mix', iterations: faults.length, ...t, ok: report.ok, stuck, seed: formatSeed(o.seed), minutes: o.minutes, faults: injected, line })}\n`,
        );
      assert.equal(t.lost + t.appliedTwice + t.reordered + stuck, 0, formatReport(report));
    } catch (cause) {
      if (p) console.log(`# soak diagnosis:\n${await p.diagnose().catch((e: Error) => e.message)}`);
      throw cause;
    } finally {
      await injector?.releasePaused().catch(() => {});
      await p?.stopAll();
      await db?.drop().catch(() => {});
      await stack?.stop();
      await netns?.destroy();
    }
  });

/**
 * Runs the plan's begins, ends and checks in their order (an end before a begin at the same time, so a subject is
 * free again; a check before the faults after it), each awaited. A slow step (a broker restart) shifts every later
 * step by its delay, so durations and gaps stay the plan's and the same faults overlap. Between steps the roles are watched for deaths nobody caused.
 * Returns the faults injected, by kind.
 */
async function runTimeline(
  inject: SoakFaults,
  faults: PlannedFault[],
  minutes: number,
  check: (atMin: number) => Promise<void>,
): Promise<Partial<Record<FaultKind, number>>> {
  type Step = { at: number; order: number; what: string; run: () => Promise<void> };
  const steps: Step[] = [
    ...faults.flatMap((f): Step[] => [
      { at: f.atMs + f.durationMs, order: 0, what: `end ${f.kind} ${f.target}`, run: () => inject.end(f) },
      {
        at: f.atMs,
        order: 2,
        what: `begin ${f.kind} ${f.target} for ${f.durationMs / 1000} s`,
        run: () => inject.begin(f),
      },
    ]),
    ...checkTimes(minutes).map((at) => ({
      at,
      order: 1,
      what: `check at ${at / 60_000} min`,
      run: () => check(at / 60_000),
    })),
    { at: minutes * 60_000, order: 3, what: 'the end of the schedule', run: async () => {} },
  ].sort((a, b) => a.at - b.at || a.order - b.order);
  const injected: Partial<Record<FaultKind, number>> = {};
  const t0 = Date.now();
  let lag = 0;
  for (const step of steps) {
    while (Date.now() - t0 < step.at + lag) {
      inject.assertAlive(`before "${step.what}"`);
      await sleep(Math.min(2000, step.at + lag - (Date.now() - t0)));
    }
    const started = Date.now();
    try {
      await step.run();
    } catch (cause) {
      throw new Error(
        `soak step "${step.what}" at +${((started - t0) / 1000).toFixed(1)} s failed: ${(cause as Error).message}`,
        { cause },
      );
    }
    const took = Date.now() - started;
    lag = Math.max(lag, Date.now() - t0 - step.at);
    console.log(
      `# soak +${((started - t0) / 1000).toFixed(1)} s (plan +${(step.at / 1000).toFixed(1)} s) ${step.what}${took > 1000 ? ` (${(took / 1000).toFixed(1)} s)` : ''}`,
    );
  }
  for (const f of faults) injected[f.kind] = (injected[f.kind] ?? 0) + 1;
  return injected;
}

/** A five-minute check: not final (work in flight is fine), but nothing lost, applied twice or reordered. */
async function checkMidRun(p: Pipeline): Promise<void> {
  const report = await p.verify({ final: false, stuckAfterMs: 120_000 });
  const t = totals(report);
  console.log(
    `# soak check: ${t.events} events, ${t.lost} lost, ${t.appliedTwice} applied twice, ${t.reordered} reordered, ${stuckOf(report)} stuck (tolerated mid-run)`,
  );
  assert.equal(t.lost + t.appliedTwice + t.reordered, 0, formatReport(report));
}

/**
 * Everything written is delivered and settled: open failures replayed (the downstream is fixed), then a final
 * verification that holds, within DRAIN_MS. A violation that waiting cannot mend fails at once.
 */
async function drain(p: Pipeline, inject: SoakFaults): Promise<VerifyReport> {
  const deadline = Date.now() + DRAIN_MS;
  for (;;) {
    await inject.replayOpen();
    try {
      return await p.settle(Math.min(60_000, Math.max(1, deadline - Date.now())), { stuckAfterMs: 60_000 });
    } catch (cause) {
      if ((cause as Error).message.includes('the verifier found violations') || Date.now() > deadline) throw cause;
    }
  }
}
