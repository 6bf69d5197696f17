import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { Sql } from '@postbox/engine';
import { uniqueTopic } from '../../support/kafka.ts';
import type { Netns } from '../../support/netns.ts';
import type { PrivateStack } from '../../support/private-stack.ts';
import { spawnPostbox, type RoleProcess } from '../../support/processes.ts';
import type { Role } from './fault-schedule.ts';
import { SAGA_ROLES, SagaRig, type SagaRole } from './saga-rig.ts';

/**
 * The order-fulfilment saga in the soak (faults.mix.test.ts): a SagaRig beside the writer, relays and consumers,
 * on the same stack and database, each of its processes a role of the soak in a namespace of its own (the fault
 * schedule kills, stops and cuts them like any other). A saga's step is asked about again after 5 s, up to 40
 * times: the budget outlasts a fault and the one beside it, so a saga compensates by its rules (an order over
 * the payment limit), not because a fault outlived its questions. One forward reply in twenty is lost, so the
 * timers fire all along.
 */
export const SAGA_RATE = 0.5;
const SERVICE = fileURLToPath(new URL('../fixtures/saga/soak-saga-service.ts', import.meta.url));
/** A replay of a saga consumer's failures ends by itself within this: one that hangs is a finding. */
const REPLAY_DEADLINE_MS = 120_000;

/** The soak's saga roles and the rig's role each runs. */
const PARTICIPANT: Record<'si' | 'sp' | 'ss' | 'sr', SagaRole> = {
  si: 'inventory',
  sp: 'payments',
  ss: 'shipping',
  sr: 'replies',
};

export interface SoakSagas {
  rig: SagaRig;
  /** How each saga role starts (again, after a kill), in its namespace. */
  starts: Partial<Record<Role, () => RoleProcess>>;
}

export async function setupSagas(o: {
  sql: Sql;
  databaseUrl: string;
  stack: PrivateStack;
  netns: Netns;
}): Promise<SoakSagas> {
  const prefix = uniqueTopic('soaksaga');
  // order-saga.ts reads it when first imported (rig.setup imports it).
  process.env.POSTBOX_TEST_SAGA_PREFIX = prefix;
  const rig = new SagaRig({
    sql: o.sql,
    databaseUrl: o.databaseUrl,
    stack: o.stack,
    prefix,
    serviceScript: SERVICE,
    env: {
      // The test bridge is a private network with no route out; PostgreSQL's password crosses it in clear.
      POSTBOX_ALLOW_INSECURE: 'postgres',
      SAGA_LOST_SHARE: '0.05',
      POSTBOX_TEST_SAGA_TIMEOUT_MS: '5000',
      POSTBOX_TEST_SAGA_ATTEMPTS: '40',
    },
  });
  await rig.setup();
  const ns = (role: Role) => o.netns.name(role);
  const starts: SoakSagas['starts'] = {
    sv: () => rig.service({ SAGA_RATE: String(SAGA_RATE) }, ns('sv')),
    sl: () => rig.relay(ns('sl')),
  };
  for (const [role, part] of Object.entries(PARTICIPANT) as Array<[Role, SagaRole]>)
    starts[role] = () => rig.consumer(part, {}, ns(role));
  return { rig, starts };
}

export interface SagaSummary {
  sagas: number;
  statuses: Record<string, number>;
  stuck: number;
  lostReplies: number;
  timerLines: number;
  line: string;
}

/**
 * After the heal: open failures of the saga's consumers replayed, the service stopped (its slot marked down by
 * the caller first), every saga driven to its end, the verifier's final check over the saga's consumers and the
 * saga promises (SagaRig.assertOutcome: completed with all three effects or compensated with each undone, no
 * effect — compensations included — twice, no timer transition twice).
 */
export async function finishSagas(rig: SagaRig): Promise<SagaSummary> {
  await replaySagaFailures(rig);
  await rig.drain(300_000);
  await replaySagaFailures(rig);
  const report = await rig.settle(180_000);
  const outcome = await rig.assertOutcome();
  assert.equal(report.sagas?.sagas, outcome.sagas, 'the verifier saw every saga');
  assert.ok(outcome.sagas > 0, 'sagas ran during the soak');
  const ended = (outcome.statuses.completed ?? 0) + (outcome.statuses.compensated ?? 0);
  const stuck = Math.max(report.sagas?.stuck.count ?? 0, outcome.sagas - ended);
  assert.equal(stuck, 0, `every saga completed or compensated: ${JSON.stringify(outcome.statuses)}`);
  // Every fourth order is over the payment limit (soak-saga-service.ts): both ends were reached, not one alone.
  if (outcome.sagas >= 4)
    assert.ok(
      (outcome.statuses.completed ?? 0) > 0 && (outcome.statuses.compensated ?? 0) > 0,
      `sagas both completed and compensated: ${JSON.stringify(outcome.statuses)}`,
    );
  return {
    sagas: outcome.sagas,
    statuses: outcome.statuses,
    stuck,
    lostReplies: outcome.lostReplies,
    timerLines: outcome.timerLines,
    line: `sagas ${outcome.sagas} (completed ${outcome.statuses.completed ?? 0}, compensated ${outcome.statuses.compensated ?? 0}), ${stuck} stuck`,
  };
}

/** `postbox failures replay` for each saga consumer with open failures (a participant's retries ran out). */
async function replaySagaFailures(rig: SagaRig): Promise<void> {
  for (const role of SAGA_ROLES) {
    const consumer = `${rig.o.prefix}-${role}`;
    const [r] = await rig.o.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM message_failure WHERE consumer_name = ${consumer} AND status = 'open'`;
    if (r!.n === 0) continue;
    const run = spawnPostbox(
      [
        'failures',
        'replay',
        '--consumer',
        consumer,
        '--reason',
        'soak: faults healed',
        '--actor',
        'soak',
        '--rate',
        '200',
      ],
      rig.env(),
    );
    const code = await Promise.race([
      run.exited,
      sleep(REPLAY_DEADLINE_MS, undefined, { ref: false }).then(() => 'hung' as const),
    ]);
    if (code === 'hung') {
      run.kill('SIGKILL');
      await run.exited;
      throw new Error(
        `failures replay of ${consumer} still ran after ${REPLAY_DEADLINE_MS} ms:\n${run.output().slice(-3000)}`,
      );
    }
    console.log(`# soak sagas: ${r!.n} open failures of ${consumer} replayed (exit ${code})`);
    assert.equal(code, 0, `failures replay of ${consumer}:\n${run.output().slice(-3000)}`);
  }
}
