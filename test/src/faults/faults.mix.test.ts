import { appendFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { formatReport, totals } from '@postbox/engine/verify';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { createNetns, type Netns } from '../support/netns.ts';
import { Pipeline, stopGracefully } from '../support/pipeline.ts';
import { createPrivateTopic, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import type { RoleProcess } from '../support/processes.ts';
import {
  checkTimes,
  describePlan,
  FAULT_KINDS,
  formatSeed,
  parseSeed,
  plan,
  planControlRuns,
  ROLES,
  SINGLE_BROKER_KINDS,
  type FaultKind,
  type Role,
} from './support/fault-schedule.ts';
import type { SagaRig } from './support/saga-rig.ts';
import { SoakControl } from './support/soak-control.ts';
import { SoakFaults, type RoleSlot } from './support/soak-faults.ts';
import { finishSagas, SAGA_RATE, setupSagas } from './support/soak-sagas.ts';
import { checkMidRun, drain, runTimeline, stuckOf } from './support/soak-timeline.ts';

// The soak (`npm run test:faults -- --mix [--minutes M] [--seed N]`): the whole chain under steady load while a
// seeded schedule (support/fault-schedule.ts) injects, one or two at a time, every fault the suite knows — kills,
// stops, silent, loud and one-way partitions between each role and each service (every role in its own network
// namespace), broker kills and stops, PostgreSQL stopped, Redis killed or wiped, rebalances, failures replayed.
// The roles: the pipeline's writer, relays and consumers, and the order-fulfilment saga's service, participants,
// reply consumer and relay (support/soak-sagas.ts). Beside them the control plane runs `postbox reconcile` and
// `postbox retention run` every 2–3 minutes (support/soak-control.ts); each run ends by itself, done or failed
// with a message. Every five minutes (after a quiet minute) the verifier checks that nothing was lost, applied
// twice or reordered; at the end everything is healed, drained and checked finally: every saga completed or
// compensated by its rules, reconciliation finds nothing, a last retention run ends cleanly. Runs only with
// POSTBOX_FAULT_MIX=1.
//
// `brokers` is the hook for the three-broker cluster (POSTBOX_FAULT_MIX_BROKERS=3): its kinds (leader kill,
// broker partition, two brokers down, rolling restart) are planned then, once the cluster listens on the bridge.

const MIX = process.env.POSTBOX_FAULT_MIX === '1';
const MINUTES = Number(process.env.POSTBOX_FAULT_MINUTES ?? 30);
const BROKERS = Number(process.env.POSTBOX_FAULT_MIX_BROKERS ?? 1);
const PARTITIONS = 4;
const RATE = 40;
const RECONCILE_MODULE = fileURLToPath(new URL('./fixtures/soak-reconcile.ts', import.meta.url));

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

// Defined only when asked for (npm run test:faults -- --mix): `npm test` shows nothing skipped.
if (MIX)
  test(`soak: ${MINUTES} min of mixed faults under ${RATE} events/s and ${SAGA_RATE} sagas/s, checked every 5 min and at the end`, {
    timeout: MINUTES * 60_000 + 1_800_000,
  }, async () => {
    const o = options();
    console.log(`# soak seed ${formatSeed(o.seed)}`);
    const kinds: FaultKind[] = o.brokers === 3 ? FAULT_KINDS : SINGLE_BROKER_KINDS;
    const faults = plan(o.seed, o.minutes, kinds);
    const runs = planControlRuns(o.seed, o.minutes);
    const checks = checkTimes(o.minutes).map((t) => `${t / 60_000} min`);
    console.log(
      `# soak plan: ${faults.length} faults and ${runs.length} control runs in ${o.minutes} min; checks ${checks.length ? `at ${checks.join(', ')} and ` : ''}at the end`,
    );
    for (const line of describePlan(faults)) console.log(`#   ${line}`);
    console.log(`#   control runs at ${runs.map((r) => `+${r.atMs / 1000} s ${r.kind}`).join(', ')}`);

    if (o.brokers === 3)
      throw new Error('the three-broker soak needs the private cluster listening on the test bridge (a host option)');
    let netns: Netns | undefined;
    let stack: PrivateStack | undefined;
    let db: TestDatabase | undefined;
    let p: Pipeline | undefined;
    let rig: SagaRig | undefined;
    let injector: SoakFaults | undefined;
    let control: SoakControl | undefined;
    const archiveDir = await mkdtemp(join(tmpdir(), 'postbox-soak-archive-'));
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
      const sagas = await setupSagas({ sql: p.sql, databaseUrl: db.url, stack, netns });
      rig = sagas.rig;
      const ctl = (control = new SoakControl({
        p,
        serviceFaults: () => injector?.serviceFaults() ?? { active: 0, begun: 0, lastEndedAt: 0 },
        env: {
          POSTBOX_RECONCILE_MODULES: `${RECONCILE_MODULE}?topic=${encodeURIComponent(topic)}&consumer=${consumer}`,
          POSTBOX_SAGA_MODULES: RECONCILE_MODULE,
          POSTBOX_TEST_SAGA_PREFIX: rig.o.prefix,
          POSTBOX_ARCHIVE_DIR: archiveDir,
        },
      }));
      await ctl.setup();
      const pipeline = p;
      const ns = netns;
      const starts: Partial<Record<Role, () => RoleProcess>> = {
        w: () =>
          pipeline.writer({ WRITER_RATE: String(RATE), WRITER_AGGREGATES: '100', WRITER_FLAKY: '0.02' }, ns.name('w')),
        r1: () => pipeline.relay({ POSTBOX_RELAY_THREADS: '1' }, ns.name('r1')),
        r2: () => pipeline.relay({}, ns.name('r2')),
        c1: () => pipeline.consumer({}, ns.name('c1')),
        c2: () => pipeline.consumer({}, ns.name('c2')),
        ...sagas.starts,
      };
      const roles = new Map(
        ROLES.map((role) => [role, { role, start: starts[role]!, current: starts[role]!(), down: false } as RoleSlot]),
      );
      const inject = (injector = new SoakFaults({ netns, stack, p, roles, prefix: consumer }));
      await sleep(15_000);
      inject.assertAlive('while warming up');

      const injected = await runTimeline({
        faults,
        runs,
        minutes: o.minutes,
        inject,
        check: () => checkMidRun(pipeline),
        control: (kind) => ctl.start(kind),
        watch: (when) => {
          inject.assertAlive(when);
          ctl.assertHealthy();
        },
      });

      await inject.healAll();
      await sleep(5000);
      inject.assertAlive('after the heal');
      await ctl.settle();
      const writer = roles.get('w')!;
      await stopGracefully(writer.current, 'writer', 'writer started');
      writer.down = true;
      // The saga drain stops the service itself and starts one that only fires timers.
      roles.get('sv')!.down = true;
      const saga = await finishSagas(rig);
      const report = await drain(pipeline, inject);
      inject.assertAlive('after the drain');
      const final = await ctl.final();
      console.log(`# soak control: final ${final.reconcile}`);
      console.log(`# soak control: final ${final.retention}`);
      const t = totals(report);
      const stuck = stuckOf(report);
      const counts = FAULT_KINDS.filter((k) => kinds.includes(k))
        .map((k) => `${k}=${injected[k] ?? 0}`)
        .join(', ');
      const c = ctl.counts;
      const dropped = await ctl.droppedPartitions();
      const line =
        `soak: seed ${formatSeed(o.seed)}, ${o.minutes} min, faults ${counts}; events ${t.events}, ${t.lost} lost, ` +
        `${t.appliedTwice} applied twice, ${t.reordered} reordered, ${stuck} stuck; ${t.duplicatesAbsorbed} duplicates absorbed, ` +
        `${report.log.duplicates} duplicate sends, ${inject.replays.length} replay runs; ${saga.line}; ` +
        `reconcile runs ${c.reconcile.runs} (failed under faults ${c.reconcile.failed}), final divergences ${final.divergences}; ` +
        `retention runs ${c.retention.runs} (failed under faults ${c.retention.failed}, ${dropped} partitions dropped)`;
      console.log(line);
      const summary = {
        scenario: 'mix',
        iterations: faults.length,
        ...t,
        ok: report.ok && final.divergences === 0,
        stuck,
        seed: formatSeed(o.seed),
        minutes: o.minutes,
        faults: injected,
        sagas: { total: saga.sagas, statuses: saga.statuses, stuck: saga.stuck, lostReplies: saga.lostReplies },
        control: { ...c, partitionsDropped: dropped, finalDivergences: final.divergences },
        line,
      };
      if (process.env.POSTBOX_FAULT_SUMMARY)
        appendFileSync(process.env.POSTBOX_FAULT_SUMMARY, `${JSON.stringify(summary)}\n`);
      assert.equal(t.lost + t.appliedTwice + t.reordered + stuck, 0, formatReport(report));
      assert.equal(final.divergences, 0, `reconciliation after the drain: ${final.reconcile}`);
      await assertRetentionKeptLive(pipeline, ctl, dropped);
    } catch (cause) {
      if (p) console.log(`# soak diagnosis:\n${await p.diagnose().catch((e: Error) => e.message)}`);
      throw cause;
    } finally {
      await injector?.releasePaused().catch(() => {});
      await rig?.stopAll().catch(() => {});
      await control?.settle().catch(() => {});
      await p?.stopAll();
      await db?.drop().catch(() => {});
      await stack?.stop();
      await netns?.destroy();
      await rm(archiveDir, { recursive: true, force: true });
    }
  });

/**
 * Retention took out what was past its window and nothing the soak still needs: every event the writer committed
 * is still in the outbox (one row per version of each aggregate), and the planted past days left with their
 * partitions (the last day at the final run at least).
 */
async function assertRetentionKeptLive(p: Pipeline, control: SoakControl, dropped: number): Promise<void> {
  const [r] = await p.sql<{ written: number; kept: number }[]>`
    SELECT (SELECT coalesce(sum(version), 0)::int FROM fault_aggregate) AS written,
           (SELECT count(*)::int FROM message_outbox WHERE topic = ${p.o.topic}) AS kept`;
  assert.equal(r!.kept, r!.written, "every event of the soak's writer is still in the outbox");
  assert.ok(dropped > 0, 'retention runs took partitions out');
  assert.equal(await control.historyLeft(), 0, 'every planted past day left its tables');
}
