import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { createNetns, type Netns } from '../support/netns.ts';
import { alive, recordScenario } from '../support/pipeline.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { holdsPartitions, waitFor, type RoleProcess } from '../support/processes.ts';
import { cutWhenWaiting, installGate, SagaRig, transactionEnd } from './support/saga-rig.ts';

// Sagas with one role partitioned while it lives on, each role in its own network namespace (the cut is a
// firewall rule in that role's namespace), under load: two sagas a second, one forward reply in five lost so
// timers fire all along. The moment of each cut is found in the database: a trigger of the test's makes the
// chosen inserts (a charge, a saga's transition) wait at an advisory lock while the test holds it; once the role's
// backend waits there — its transaction open, the statements before done — the test cuts the role and opens the
// gate. The insert is done at the server; what the role sends after it never arrives, and its transaction stays
// open there until the link is back.
// - a participant cut off (PostgreSQL and the broker) after applying a step's effect, before its record and
//   reply commit: the other member takes its partitions and meets the step's record locked; once healed, the
//   zombie's transaction commits or rolls back, and the step is applied once either way;
// - the saga timer runner cut from PostgreSQL while it fires: the other runners skip the saga it holds, and no
//   timer's transition is written twice;
// - the orchestrator's reply consumer cut from the broker mid-transition: its transition commits, the other
//   member gets the replies again, and the version fence and inbox make them change nothing.
// Each ends with a drain, the verifier's final check and the saga promises (saga-rig.ts assertOutcome).

const FULL = process.env.POSTBOX_FAULT_FULL === '1';
const ROLES = ['svc', 'timer', 'inv', 'pay1', 'pay2', 'ship', 'rep1', 'rep2', 'relay'] as const;
const prefix = uniqueTopic('psaga');

let netns: Netns;
let stack: PrivateStack;
let db: TestDatabase;
let rig: SagaRig;
const CHARGE = { name: 'charge', key: 4701 };
const TIMER = { name: 'timer', key: 4702 };
const REPLY = { name: 'reply', key: 4703 };

before(async () => {
  process.env.POSTBOX_TEST_SAGA_PREFIX = prefix;
  netns = await createNetns([...ROLES]);
  stack = await startPrivateStack({ host: netns.host, postgres: {}, redis: true, kafka: {} });
  db = await freshDatabase('pbps', stack.urls.DATABASE_URL!);
  rig = new SagaRig({
    sql: db.sql,
    databaseUrl: db.url,
    stack,
    prefix,
    env: {
      // The test bridge is a private network with no route out; PostgreSQL's password crosses it in clear.
      POSTBOX_ALLOW_INSECURE: 'postgres',
      SAGA_LOST_SHARE: '0.2',
      // Asked about after 4 s, up to 20 times: the budget outlasts a cut and the rebalance after it.
      POSTBOX_TEST_SAGA_TIMEOUT_MS: '4000',
      POSTBOX_TEST_SAGA_ATTEMPTS: '20',
    },
  });
  await rig.setup();
  // Gates the scenarios close to catch a role mid-transaction: a charge, a timer's transition, a reply's.
  await installGate(db.sql, CHARGE, 'test_saga_effect', `NEW.participant = 'payments'`);
  await installGate(db.sql, TIMER, 'saga_history', `NEW.cause ~ '^(timed out|deadline)'`);
  await installGate(db.sql, REPLY, 'saga_history', `NEW.cause !~ '^(started|timed out|deadline)'`);
});

after(async () => {
  await rig?.stopAll();
  await db?.drop().catch(() => {});
  await stack?.stop();
  await netns?.destroy();
});

const ns = (role: (typeof ROLES)[number]) => netns.name(role);
const ip = (role: (typeof ROLES)[number]) => netns.address(role);
const pgPort = () => Number(new URL(db.url).port);
const kafkaPort = () => Number(stack.urls.KAFKA_BROKERS!.split(':').at(-1));

function assertAlive(roles: RoleProcess[], when: string): void {
  for (const r of roles)
    assert.ok(alive(r), `${r.child.spawnargs.slice(4).join(' ')} died ${when}:\n${r.output().slice(-3000)}`);
}

/** The roles every scenario runs besides the one under test (a role given here runs in its namespace). */
function steadyRoles(skip: { payments?: boolean; replies?: boolean } = {}): RoleProcess[] {
  const roles = [
    rig.relay(ns('relay')),
    rig.consumer('inventory', {}, ns('inv')),
    rig.consumer('shipping', {}, ns('ship')),
  ];
  if (!skip.payments) roles.push(rig.consumer('payments', {}, ns('pay1')));
  if (!skip.replies) roles.push(rig.consumer('replies', {}, ns('rep1')));
  roles.push(rig.service({}, ns('svc')));
  return roles;
}

async function sagasCompleted(n: number): Promise<void> {
  await waitFor(
    `${n} more sagas completed`,
    async () => {
      const [r] = await db.sql<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM saga_instance WHERE status = 'completed'`;
      return r!.n >= n;
    },
    90_000,
    500,
  );
}

async function completedNow(): Promise<number> {
  const [r] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM saga_instance WHERE status = 'completed'`;
  return r!.n;
}

/** Drain, the verifier's final check and the saga promises; prints the scenario's lines. */
async function finish(scenario: string, roles: RoleProcess[], note: string): Promise<void> {
  assertAlive(roles, 'after the heal');
  const statuses = await rig.drain();
  const report = await rig.settle();
  const outcome = await rig.assertOutcome();
  assert.equal(report.sagas?.sagas, outcome.sagas);
  assert.ok(outcome.timerLines > 0, 'timers fired during the scenario');
  await rig.stopAll();
  console.log(
    `# ${scenario}: ${outcome.sagas} sagas (${Object.entries(statuses)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}), ${outcome.lostReplies} replies lost, ${outcome.timerLines} timer transitions; 0 effects twice, ` +
      `0 timer transitions twice, ${report.sagas?.stuck.count ?? 0} stuck; ${note}`,
  );
  recordScenario({ scenario, iterations: 1, report });
}

test('participant cut off after applying a step, before its record and reply commit: applied once, every saga ends', {
  timeout: 420_000,
}, async () => {
  const roles = steadyRoles({ payments: true });
  const pay1 = rig.consumer('payments', { LOG_LEVEL: 'info' }, ns('pay1'));
  const pay2 = rig.consumer('payments', { LOG_LEVEL: 'info' }, ns('pay2'));
  await waitFor(
    'both payments members to hold partitions',
    async () => holdsPartitions(pay1) && holdsPartitions(pay2),
    60_000,
  );
  await sagasCompleted((await completedNow()) + 3);
  // pay1's effect insert waits on the held table: its claim of the step is written, the charge is next.
  const zombie = await cutWhenWaiting(db.sql, {
    gate: CHARGE,
    address: ip('pay1'),
    what: 'pay1 to apply a charge',
    timeoutMs: 60_000,
    cut: () => netns.cut('pay1', [pgPort(), kafkaPort()], 'drop'),
  });
  // The charge is done at the server, uncommitted; the record, the reply and the commit are lost on the way.
  await sleep(15_000);
  assertAlive([...roles, pay1, pay2], 'while pay1 was cut off');
  await netns.heal('pay1');
  const fate = await transactionEnd(db.sql, zombie.xid);
  await finish('partition.saga-participant-after-apply', [...roles, pay1, pay2], `the zombie's transaction ${fate}`);
});

if (FULL)
  test('saga timer runner cut from PostgreSQL while it fires: the others skip its saga, no timer transition twice', {
    timeout: 420_000,
  }, async () => {
    const roles = steadyRoles();
    const timer = rig.service({ SAGA_ORDERS: '0' }, ns('timer'));
    await sagasCompleted((await completedNow()) + 3);
    // Its transition waits at the history insert: the saga row is claimed, the state moved, the commands written.
    const zombie = await cutWhenWaiting(db.sql, {
      gate: TIMER,
      address: ip('timer'),
      what: 'the timer runner to fire',
      timeoutMs: 90_000,
      cut: () => netns.cut('timer', [pgPort()], 'drop'),
    });
    const before = await completedNow();
    await sleep(15_000);
    assert.ok((await completedNow()) > before, 'sagas went on completing while the runner was cut off');
    assertAlive([...roles, timer], 'while the timer runner was cut off');
    await netns.heal('timer');
    const fate = await transactionEnd(db.sql, zombie.xid);
    await finish('partition.saga-timer-postgres', [...roles, timer], `the zombie's transaction ${fate}`);
  });

if (FULL)
  test("orchestrator's reply consumer cut from the broker mid-transition: the other member takes the replies, each transition once", {
    timeout: 420_000,
  }, async () => {
    const roles = steadyRoles({ replies: true });
    const rep1 = rig.consumer('replies', { LOG_LEVEL: 'info' }, ns('rep1'));
    const rep2 = rig.consumer('replies', { LOG_LEVEL: 'info' }, ns('rep2'));
    await waitFor(
      'both reply members to hold partitions',
      async () => holdsPartitions(rep1) && holdsPartitions(rep2),
      60_000,
    );
    await sagasCompleted((await completedNow()) + 3);
    const zombie = await cutWhenWaiting(db.sql, {
      gate: REPLY,
      address: ip('rep1'),
      what: 'rep1 to apply a reply',
      timeoutMs: 60_000,
      cut: () => netns.cut('rep1', [kafkaPort()], 'drop'),
    });
    // PostgreSQL is reachable: rep1's transition commits; its offsets cannot, and its session ends at the broker.
    const fate = await transactionEnd(db.sql, zombie.xid, 30_000);
    const before = await completedNow();
    await sleep(15_000);
    assert.ok((await completedNow()) > before, 'rep2 carried the sagas on while rep1 was cut off');
    assertAlive([...roles, rep1, rep2], 'while rep1 was cut from the broker');
    await netns.heal('rep1');
    await finish('partition.saga-replies-broker', [...roles, rep1, rep2], `rep1's transition at the cut ${fate}`);
  });
