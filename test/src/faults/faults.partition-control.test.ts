import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { enqueueMany, type EventInput } from '@postbox/engine';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { createNetns, type Netns } from '../support/netns.ts';
import { Pipeline, recordScenario, stopGracefully } from '../support/pipeline.ts';
import { createPrivateTopic, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { payWithoutEvent, placeOrder } from '../reconcile/fixtures.ts';
import { cutWhenWaiting, type Gate, installGate } from './support/saga-rig.ts';

// The control plane partitioned while an operator command runs, under load (a writer, a relay and a consumer, each
// in its own network namespace; the command in another): cut from Redis during `postbox failures replay`, cut from
// PostgreSQL during `postbox reconcile --execute`. The cut comes mid-command: a trigger of the test's holds the
// command's eleventh audit insert (saga-rig.ts cutWhenWaiting), the test cuts, then lets it through — ten items
// done, one committed at the server without what follows it. Promised: the command ends by itself within
// DEADLINE_MS of the cut (an operator's command must not hang on a silent network), and once healed and run again,
// every failure is replayed once and audited once, every missing event re-emitted once and audited once; the
// verifier's final check after a drain.
//
// The full level only (npm run test:faults).

const FULL = process.env.POSTBOX_FAULT_FULL === '1';
const PARTITIONS = 3;
const ROLES = ['w', 'r', 'c', 'ctl'] as const;
const DEADLINE_MS = 60_000;
const ITEMS = 24;
const DEMO_MODULE = fileURLToPath(new URL('../../../packages/api/src/demo/reconcile.ts', import.meta.url));

let netns: Netns;
let stack: PrivateStack;
let db: TestDatabase;
const pipelines: Pipeline[] = [];
const commands: RoleProcess[] = [];

before(async () => {
  if (!FULL) return;
  netns = await createNetns([...ROLES]);
  stack = await startPrivateStack({ host: netns.host, postgres: {}, redis: true, kafka: {} });
  db = await freshDatabase('pbpx', stack.urls.DATABASE_URL!);
});

after(async () => {
  for (const c of commands) c.kill('SIGKILL');
  for (const p of pipelines) await p.stopAll();
  await db?.drop().catch(() => {});
  await stack?.stop();
  await netns?.destroy();
});

async function loadedPipeline(name: string): Promise<Pipeline> {
  const topic = uniqueTopic(name);
  await createPrivateTopic(stack, topic, PARTITIONS);
  const p = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: stack.urls.KAFKA_BROKERS!,
    redisUrl: stack.urls.REDIS_URL!,
    topic,
    partitions: PARTITIONS,
    consumer: `${name}${topic.slice(-6)}`,
    // The test bridge is a private network with no route out; PostgreSQL's password crosses it in clear.
    env: { POSTBOX_ALLOW_INSECURE: 'postgres' },
  });
  pipelines.push(p);
  await p.setup();
  p.writer({ WRITER_RATE: '30', WRITER_AGGREGATES: '40' }, netns.name('w'));
  p.relay({}, netns.name('r'));
  p.consumer({}, netns.name('c'));
  return p;
}

/** An operator command in the control plane's namespace. */
function command(p: Pipeline, args: string[], env: Record<string, string> = {}): RoleProcess {
  const c = spawnPostbox(args, p.env(env), { netns: netns.name('ctl') });
  commands.push(c);
  return c;
}

/**
 * Runs `start` with the gate closed at its eleventh audit, cuts the control plane from `port`, and waits up to
 * DEADLINE_MS for the command to end by itself; then heals and waits for it to end (the link back, a hung
 * command finishes). Returns how the command ended at first: its exit code, or 'hung'.
 */
async function cutMidCommand(
  p: Pipeline,
  gate: Gate,
  port: number,
  start: () => RoleProcess,
): Promise<{ first: number | null | 'hung'; afterHeal: number | null; ms: number }> {
  const cmd = start();
  await cutWhenWaiting(p.sql, {
    gate,
    address: netns.address('ctl'),
    what: 'the command to write its eleventh audit',
    timeoutMs: 60_000,
    cut: () => netns.cut('ctl', [port], 'drop'),
  });
  const at = Date.now();
  const first = await Promise.race([cmd.exited, sleep(DEADLINE_MS, 'hung' as const, { ref: false })]);
  const ms = Date.now() - at;
  await netns.heal('ctl');
  const afterHeal = await Promise.race([cmd.exited, sleep(120_000, null, { ref: false })]);
  if (afterHeal === null) cmd.kill('SIGKILL');
  return { first, afterHeal, ms };
}

async function count(p: Pipeline, query: string, params: unknown[]): Promise<number> {
  const [row] = await p.sql.unsafe<{ n: number }[]>(`SELECT count(*)::int AS n FROM (${query}) q`, params as never[]);
  return row!.n;
}

function assertEndedByItself(what: string, r: { first: number | null | 'hung'; ms: number }, cmd: string): void {
  assert.notEqual(
    r.first,
    'hung',
    `${what} did not end within ${DEADLINE_MS} ms of a silent partition (it waits on a request that never returns):\n${cmd}`,
  );
}

if (FULL)
  test('control plane cut from Redis (silent) during a replay: the command ends by itself, every failure replayed once and audited once', {
    timeout: 480_000,
  }, async () => {
    const p = await loadedPipeline('pxrd');
    const stuck = Array.from({ length: ITEMS }, (_, i) => `${p.o.consumer}-stuck-${i}`);
    await p.sql`UPDATE test_handler_control SET fail_aggregates = ${stuck}`;
    const events: EventInput[] = stuck.flatMap((a) =>
      [1, 2].map((v) => ({ event_type: 'FaultEvent', aggregate_id: a, aggregate_version: v, data: { v } })),
    );
    await p.sql.begin((tx) => enqueueMany(tx, events, { topic: p.o.topic, producer: 'fault-test' }));
    const open = `SELECT 1 FROM message_failure WHERE consumer_name = $1 AND status = 'open'`;
    await waitFor(
      'every stuck aggregate in the failure store',
      async () => (await count(p, open, [p.o.consumer])) >= ITEMS,
      120_000,
      1000,
    );
    await p.sql`UPDATE test_handler_control SET fail_aggregates = '{}'`;
    const gate = await installGate(
      p.sql,
      { name: 'replay', key: 4711 },
      'operator_audit',
      `NEW.action = 'failure.replay' AND (SELECT count(*) FROM operator_audit WHERE action = 'failure.replay') >= 10`,
    );
    const replay = (): RoleProcess =>
      command(p, [
        'failures',
        'replay',
        '--consumer',
        p.o.consumer,
        '--reason',
        'partition test',
        '--actor',
        'fault-test',
        '--rate',
        '50',
      ]);
    let first = '';
    const r = await cutMidCommand(p, gate, Number(new URL(stack.urls.REDIS_URL!).port), () => {
      const c = replay();
      void c.exited.then(() => (first = c.output()));
      return c;
    });
    const again = replay();
    assert.equal(await again.exited, 0, again.output());
    await stopGracefully(
      [...p.processes].find((x) => x.child.spawnargs.some((a) => a.endsWith('writer.ts')))!,
      'writer',
      'writer started',
    );
    const report = await p.settle(240_000);
    const replayed = `SELECT 1 FROM message_failure WHERE consumer_name = $1 AND status = 'replayed'`;
    assert.equal(await count(p, replayed, [p.o.consumer]), ITEMS, 'every failure replayed');
    const audits = `SELECT target FROM operator_audit WHERE action = 'failure.replay'`;
    assert.equal(await count(p, audits, []), ITEMS, 'each replay audited once');
    assert.equal(
      await count(p, `SELECT DISTINCT target FROM operator_audit WHERE action = 'failure.replay'`, []),
      ITEMS,
    );
    console.log(
      `# replay at the cut: ${r.first === 'hung' ? `still running after ${r.ms} ms` : `exit ${r.first} after ${r.ms} ms`}, after the heal: exit ${r.afterHeal}`,
    );
    recordScenario({ scenario: 'partition.control-replay-redis', iterations: 1, report });
    assertEndedByItself('postbox failures replay', r, first);
  });

if (FULL)
  test('control plane cut from PostgreSQL (silent) during a reconciliation repair: the command ends by itself, each event re-emitted once and audited once', {
    timeout: 480_000,
  }, async () => {
    const p = await loadedPipeline('pxpg');
    const orders = Array.from({ length: ITEMS }, (_, i) => `${p.o.consumer}-order-${i}`);
    for (const o of orders) await placeOrder(p.sql, p.o.topic, o);
    for (const o of orders) await payWithoutEvent(p.sql, o);
    const gate = await installGate(
      p.sql,
      { name: 'reemit', key: 4712 },
      'operator_audit',
      `NEW.action = 'reconcile.reemit' AND (SELECT count(*) FROM operator_audit WHERE action = 'reconcile.reemit') >= 10`,
    );
    const env = {
      POSTBOX_RECONCILE_MODULES: `${DEMO_MODULE}?topic=${p.o.topic}`,
      POSTBOX_RECONCILE_GRACE_MS: 'outbox-missing=0',
    };
    const args = ['reconcile', '--check', 'outbox-missing', '--execute', '--rate', '50', '--canary', '0'];
    const reconcile = (): RoleProcess =>
      command(p, [...args, '--reason', 'partition test', '--actor', 'fault-test'], env);
    let first = '';
    const r = await cutMidCommand(p, gate, Number(new URL(db.url).port), () => {
      const c = reconcile();
      void c.exited.then(() => (first = c.output()));
      return c;
    });
    const again = reconcile();
    assert.equal(await again.exited, 0, again.output());
    await stopGracefully(
      [...p.processes].find((x) => x.child.spawnargs.some((a) => a.endsWith('writer.ts')))!,
      'writer',
      'writer started',
    );
    const report = await p.settle(240_000);
    const twice = await p.sql<{ aggregate_id: string; n: number }[]>`
      SELECT aggregate_id, count(*)::int AS n FROM message_outbox
      WHERE aggregate_id = ANY(${orders}) AND aggregate_version = 2 GROUP BY 1`;
    assert.equal(twice.length, ITEMS, 'every order paid has its event');
    assert.deepEqual(
      twice.filter((t) => t.n !== 1),
      [],
      'each missing event re-emitted once',
    );
    assert.equal(
      await count(p, `SELECT 1 FROM reconciliation_run WHERE status = 'running'`, []),
      0,
      'the run the cut ended is marked abandoned by the next one, none left running',
    );
    const audits = `SELECT target FROM operator_audit WHERE action = 'reconcile.reemit'`;
    assert.equal(await count(p, audits, []), ITEMS, 'each re-emit audited once');
    assert.equal(
      await count(p, `SELECT DISTINCT target FROM operator_audit WHERE action = 'reconcile.reemit'`, []),
      ITEMS,
    );
    console.log(
      `# reconcile at the cut: ${r.first === 'hung' ? `still running after ${r.ms} ms` : `exit ${r.first} after ${r.ms} ms`}, after the heal: exit ${r.afterHeal}`,
    );
    recordScenario({ scenario: 'partition.control-reconcile-postgres', iterations: 1, report });
    assertEndedByItself('postbox reconcile --execute', r, first);
  });
