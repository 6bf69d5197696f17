import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { KafkaOffsets, KafkaTopicReader } from '@postbox/engine/kafka';
import { formatReport, verify, type VerifyReport } from '@postbox/engine/verify';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { faultIterations, recordScenario } from '../support/pipeline.ts';
import { createPrivateTopic, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { spawnPostbox, spawnScript, waitFor, type RoleProcess } from '../support/processes.ts';
import { settle } from '../support/verified.ts';
import { failpointLoop, type FailpointLoopResult } from './support/failpoint-loop.ts';

// Sagas under kill -9 at their crash boundaries, with load running: order-fulfilment sagas (reserve → charge →
// ship, every fourth order refused at charge and compensated) between real processes — a saga service starting
// sagas (two a second, all along) and running the timer runner, three participants and two reply consumers (`postbox consume`), a relay —
// with one forward reply in ten lost (so timeouts, questions and answers happen all along). Killed ITERATIONS times
// each, three loops at once: a participant after applying a step and before its record and reply are written,
// a reply consumer after its transitions committed and before its offsets, the saga service after a timer's
// transition committed. Redis (the consumers' retry scheduler) is wiped while timers wait. Ends with every saga
// ended, the verifier's saga and consumer checks, and every participant effect counted.
// 3 kills per boundary in `npm test` (each run is a process start and a group join: 20 × 3 loops take three to
// four minutes); `npm run test:faults` runs its --iterations (default 20).
const ITERATIONS = faultIterations(2);
const prefix = uniqueTopic('sagafault');
const SERVICE = fileURLToPath(new URL('./fixtures/saga/saga-service.ts', import.meta.url));
const CONSUMER = fileURLToPath(new URL('./fixtures/saga/saga-consumer.ts', import.meta.url));
const ROLES = ['inventory', 'payments', 'shipping', 'replies'] as const;

let db: TestDatabase;
let stack: PrivateStack;
let topicList = '';
const processes = new Set<RoleProcess>();

before(async () => {
  process.env.POSTBOX_TEST_SAGA_PREFIX = prefix;
  [db, stack] = await Promise.all([freshDatabase(), startPrivateStack({ kafka: {}, redis: true })]);
  const { topics } = await import('../saga/fixtures/order-saga.ts');
  for (const topic of Object.values(topics)) await createPrivateTopic(stack, topic, 3);
  topicList = Object.values(topics)
    .map((t) => `${t}:3`)
    .join(',');
  await db.sql`CREATE TABLE test_saga_effect (participant text NOT NULL, order_id text NOT NULL, action text NOT NULL)`;
  await db.sql`CREATE TABLE test_saga_lost_reply (event_id uuid PRIMARY KEY)`;
});

after(async () => {
  for (const p of processes) p.kill('SIGKILL');
  await Promise.all([...processes].map((p) => p.exited));
  await stack?.stop();
  await db?.drop();
});

function env(extra: Record<string, string> = {}): Record<string, string> {
  return {
    DATABASE_URL: db.url,
    KAFKA_BROKERS: stack.urls.KAFKA_BROKERS!,
    REDIS_URL: stack.urls.REDIS_URL!,
    POSTBOX_TEST_SAGA_PREFIX: prefix,
    // Asked about after 15 s, up to 12 times: three minutes of questions outlast the kill loops, where a consumer
    // group restarting all the time can hold a reply back for a minute.
    POSTBOX_TEST_SAGA_TIMEOUT_MS: '15000',
    POSTBOX_TEST_SAGA_ATTEMPTS: '12',
    POSTBOX_TOPICS: topicList,
    POSTBOX_KAFKA_SESSION_TIMEOUT_MS: '3000',
    POSTBOX_KAFKA_HEARTBEAT_MS: '500',
    LOG_LEVEL: 'warn',
    ...extra,
  };
}

function track(p: RoleProcess): RoleProcess {
  processes.add(p);
  void p.exited.then(() => processes.delete(p));
  return p;
}

const service = (extra: Record<string, string> = {}) =>
  track(spawnScript(SERVICE, [], env({ SAGA_RATE: '5', SAGA_ORDERS: '1000000', ...extra })));
const consumer = (role: (typeof ROLES)[number], extra: Record<string, string> = {}) =>
  track(spawnPostbox(['consume', CONSUMER], env({ SAGA_ROLE: role, SAGA_LOST_SHARE: '0.1', ...extra })));
const relay = () =>
  track(
    spawnPostbox(
      ['relay'],
      env({ POSTBOX_RELAY_THREADS: '0', POSTBOX_RELAY_POLL_MS: '100', POSTBOX_RELAY_LEASE_MS: '3000' }),
    ),
  );

async function verifySagas(): Promise<VerifyReport> {
  const { topics } = await import('../saga/fixtures/order-saga.ts');
  const kafka = { brokers: stack.urls.KAFKA_BROKERS!.split(','), clientId: 'postbox-test-saga-verify' };
  const reader = new KafkaTopicReader({ ...kafka, timeoutMs: 60_000 });
  const offsets = new KafkaOffsets(kafka);
  try {
    return await verify(
      { sql: db.sql, reader, offsets },
      ROLES.map((role) => ({
        name: `${prefix}-${role}`,
        groupId: `postbox.${prefix}-${role}`,
        topics: [topics[role]],
      })),
      { final: true, stuckAfterMs: 60_000 },
    );
  } finally {
    await offsets.close();
    await reader.close();
  }
}

test(`sagas under kill -9 at their crash boundaries, ${ITERATIONS} times each, with lost replies and Redis wiped: every saga ends, no effect twice`, {
  timeout: 600_000 + ITERATIONS * 30_000,
}, async () => {
  relay();
  for (const role of ['inventory', 'shipping'] as const) consumer(role);
  // A steady saga service starts sagas all along (and fires timers too: any number of runners may run), so the
  // loops below always have traffic, whichever finishes first. A loop that is done leaves a steady member of its
  // role behind: the sagas advance only through the replies consumer, so with the replies loop done and no one
  // reading replies, no saga reached payments and the payments loop starved until its deadline (seen once).
  service({ SAGA_RATE: '1.5' });
  const deadline = Date.now() + 300_000 + ITERATIONS * 20_000;
  const thenSteady = (role: 'payments' | 'replies') => (result: FailpointLoopResult) => {
    consumer(role);
    return result;
  };
  const loops = Promise.all([
    failpointLoop({
      name: 'saga.participant.after-apply',
      maxPass: 6,
      iterations: ITERATIONS,
      spawn: (fp) => consumer('payments', fp),
      deadline,
    }).then(thenSteady('payments')),
    failpointLoop({
      name: 'consumer.after-commit-before-offset',
      maxPass: 3,
      iterations: ITERATIONS,
      spawn: (fp) => consumer('replies', fp),
      deadline,
    }).then(thenSteady('replies')),
    failpointLoop({
      name: 'saga.timer.after-fire',
      maxPass: 3,
      iterations: ITERATIONS,
      spawn: (fp) => service({ SAGA_RATE: '0.5', ...fp }),
      deadline,
    }),
  ]);
  // Redis wiped while sagas wait on timers: the consumers' retry jobs go, the sagas' timers (rows) do not.
  await waitFor(
    'sagas waiting on timers',
    async () => {
      const [r] = await db.sql<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM saga_instance WHERE status = 'resolving'`;
      return r!.n > 0 ? true : undefined;
    },
    120_000,
    200,
  );
  const redis = new Redis(stack.urls.REDIS_URL!);
  await redis.flushall();
  await redis.quit();
  const results = await loops;

  // The last runs, with no failpoint, until done: beside the steady payments and replies consumers the loops left, a
  // second reply consumer (two processes applying replies of the same sagas at once: the row lock and the version
  // make one transition win) and a saga service.
  consumer('replies');
  for (const p of [...processes].filter((x) => x.child.spawnargs.includes(SERVICE))) p.kill('SIGTERM');
  service({ SAGA_ORDERS: '0' }); // starts no more sagas: fires the timers of those in flight
  const statuses = await waitFor(
    'every saga ended',
    async () => {
      const rows = await db.sql<{ status: string; n: number }[]>`
        SELECT status, count(*)::int AS n FROM saga_instance GROUP BY status`;
      const by = Object.fromEntries(rows.map((r) => [r.status, r.n]));
      return (by.running ?? 0) + (by.resolving ?? 0) + (by.compensating ?? 0) === 0 ? by : undefined;
    },
    240_000,
    1000,
  );
  const report = await settle(verifySagas, 120_000).catch(async (e: unknown) => {
    throw new Error(`${(e as Error).message}\n${formatReport(await verifySagas())}`);
  });
  assert.deepEqual(
    report.violations.map((v) => v.message),
    [],
  );

  // Effects: no step applied twice, and what each order's end implies.
  const effects = await db.sql<{ order_id: string; participant: string; action: string; n: number }[]>`
    SELECT order_id, participant, action, count(*)::int AS n FROM test_saga_effect GROUP BY 1, 2, 3`;
  const twice = effects.filter((e) => e.n > 1);
  assert.deepEqual(twice, [], 'no participant effect applied twice');
  const byOrder = new Map<string, Set<string>>();
  for (const e of effects) {
    const set = byOrder.get(e.order_id) ?? new Set<string>();
    set.add(`${e.participant}:${e.action}`);
    byOrder.set(e.order_id, set);
  }
  const sagas = await db.sql<
    { business_key: string; status: string }[]
  >`SELECT business_key, status FROM saga_instance`;
  assert.equal(report.sagas?.sagas, sagas.length);
  assert.ok(sagas.length >= ITERATIONS * 3, `sagas ran all along (${sagas.length})`);
  const wrong: string[] = [];
  for (const s of sagas) {
    const done = byOrder.get(s.business_key) ?? new Set<string>();
    const ok =
      s.status === 'completed'
        ? done.has('inventory:reserve') &&
          done.has('payments:charge') &&
          done.has('shipping:ship') &&
          !done.has('inventory:release') &&
          !done.has('payments:refund')
        : s.status === 'compensated'
          ? !done.has('shipping:ship') &&
            done.has('inventory:reserve') === done.has('inventory:release') &&
            done.has('payments:charge') === done.has('payments:refund')
          : false;
    if (!ok) wrong.push(`${s.business_key} ${s.status}: ${[...done].sort().join(', ')}`);
  }
  assert.deepEqual(wrong, [], 'every saga completed with all three effects, or compensated with each undone');
  const [lost] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM test_saga_lost_reply`;
  const [asked] = await db.sql<{ n: number }[]>`
    SELECT count(DISTINCT saga_id)::int AS n FROM saga_history WHERE to_status = 'resolving'`;
  assert.ok(lost!.n > 0 && asked!.n > 0, 'replies were lost and the sagas asked');
  const kills = results.reduce((s, r) => s + r.kills, 0);
  console.log(
    `# saga faults: ${kills} kills (${results.map((r) => `${r.name} ${r.kills}`).join(', ')}), Redis wiped once; ` +
      `${sagas.length} sagas: ${Object.entries(statuses)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}; ${lost!.n} replies lost, ${asked!.n} sagas asked; 0 lost, ${twice.length} applied twice, ` +
      `${report.sagas?.stuck.count ?? 0} stuck`,
  );
  recordScenario({ scenario: 'sagas', iterations: kills, report });
});
