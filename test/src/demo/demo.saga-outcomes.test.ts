import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import { readConfig } from '@postbox/api';
import { freePort } from '@postbox/stack';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// `postbox start` runs the order-fulfilment saga demo (reserve → charge → ship, ship the pivot) with a third of
// the payments declined and a third of the step replies lost: within a minute a new user sees sagas completed,
// compensated, and resolved (a lost reply asked about, then completed). The test runs the real process against
// its own database, topics and consumer groups, stops it, and reads the final state.
let db: TestDatabase;
let postbox: RoleProcess | undefined;
const LOST = 'demo: reply lost (POSTBOX_DEMO_LOST_REPLIES)';

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  if (postbox && postbox.child.exitCode === null) {
    postbox.kill('SIGKILL');
    await postbox.exited;
  }
  await db?.drop();
});

interface Saga {
  saga_id: string;
  business_key: string;
  status: string;
  path: string[];
}

async function sagas(): Promise<Saga[]> {
  return db.sql<Saga[]>`
    SELECT s.saga_id, s.business_key, s.status, array_agg(h.to_status ORDER BY h.id) AS path
    FROM saga_instance s JOIN saga_history h USING (saga_id)
    WHERE s.saga_type = 'demo-fulfilment' GROUP BY s.saga_id`;
}

const resolvedThenCompleted = (s: Saga) => s.status === 'completed' && s.path.includes('resolving');

test('the demo completes, compensates and resolves sagas; nothing is stuck or applied twice', async () => {
  const started = Date.now();
  const id = randomBytes(4).toString('hex');
  postbox = spawnPostbox(['start'], {
    DATABASE_URL: db.url,
    REDIS_URL: stack.REDIS_URL,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
    POSTBOX_TOPICS: `demo-saga-${id}:2`,
    POSTBOX_API_PORT: String(await freePort()),
    POSTBOX_DEMO_RATE: '10',
    POSTBOX_DEMO_SAGA_RATE: '2',
    POSTBOX_DEMO_REFUSED_PAYMENTS: '0.3',
    POSTBOX_DEMO_LOST_REPLIES: '0.3',
    POSTBOX_DEMO_SAGA_PREFIX: `demo-saga-${id}`,
    POSTBOX_RELAY_THREADS: '0',
    LOG_LEVEL: 'warn',
  });
  const p = postbox;
  // At least 40 s of traffic, and until each outcome has been seen (a bound of three minutes, not a timing test).
  await waitFor(
    'completed, compensated and resolved sagas',
    async () => {
      if (p.child.exitCode !== null) throw new Error(`postbox start exited ${p.child.exitCode}:\n${p.output()}`);
      if (Date.now() - started < 40_000) return false;
      const all = await sagas();
      return (
        all.some((s) => s.status === 'completed') &&
        all.some((s) => s.status === 'compensated') &&
        all.some(resolvedThenCompleted)
      );
    },
    180_000,
    1000,
  );
  p.kill('SIGINT');
  assert.equal(await p.exited, 0, p.output());
  const out = p.output();
  if (process.env.POSTBOX_TEST_SHOW) console.log(out);
  assert.match(out, /demo sagas: demo-fulfilment at 2\/s \(payments declined 30 %, replies lost 30 %\)/);
  assert.match(
    out,
    /\| {2}sagas running \d+ {2}resolving \d+ {2}compensating \d+ {2}completed \d+ {2}compensated \d+ {2}needs attention 0/,
    'the progress line shows the saga counts',
  );
  assert.match(out, /stopped cleanly/);

  // Final state, read after the process stopped.
  const all = await sagas();
  const by = (status: string) => all.filter((s) => s.status === status);
  assert.deepEqual(by('needs_attention'), [], 'no saga needs an operator');
  const completed = by('completed');
  const compensated = by('compensated');
  assert.ok(completed.length > 0 && compensated.length > 0, `sagas by status: ${counts(all)}`);

  const effects = new Map(
    (
      await db.sql<Array<{ order_id: string; stock: string | null; payment: string | null; shipped: boolean }>>`
        SELECT o.order_id, r.status AS stock, p.status AS payment, (s.order_id IS NOT NULL) AS shipped
        FROM demo_order o
        LEFT JOIN demo_stock_reservation r USING (order_id)
        LEFT JOIN demo_payment p USING (order_id)
        LEFT JOIN demo_shipment s USING (order_id)`
    ).map((e) => [e.order_id, e]),
  );
  for (const s of completed) {
    assert.deepEqual(
      effects.get(s.business_key),
      { order_id: s.business_key, stock: 'reserved', payment: 'charged', shipped: true },
      `completed saga ${s.saga_id}: stock reserved, paid, shipped`,
    );
  }
  for (const s of compensated) {
    assert.deepEqual(
      effects.get(s.business_key),
      { order_id: s.business_key, stock: 'released', payment: 'declined', shipped: false },
      `compensated saga ${s.saga_id}: payment declined, its reservation released, nothing shipped`,
    );
    const at = s.path.indexOf('compensating');
    assert.ok(at > 0 && s.path.indexOf('compensated') > at, `history of ${s.saga_id}: ${s.path.join(' → ')}`);
  }

  // Resolved: a reply was lost (recorded as ignored, never applied), the step timed out, the saga asked
  // (resolving), the participant said applied, and the saga went on to complete. A step that merely timed out on a
  // slow machine resolves the same way, so the lost replies are checked to have caused resolved sagas, not all.
  const lost = await db.sql<Array<{ saga_id: string }>>`
    SELECT DISTINCT saga_id FROM saga_reply_ignored WHERE reason = ${LOST} AND direction = 'forward' AND attempt = 1`;
  const lostIn = new Set(lost.map((l) => l.saga_id));
  const resolved = all.filter((s) => resolvedThenCompleted(s) && lostIn.has(s.saga_id));
  assert.ok(resolved.length > 0, `no saga lost a reply and then resolved to completed: ${counts(all)}`);
  for (const s of resolved) {
    const at = s.path.indexOf('resolving');
    assert.equal(s.path[at + 1] === 'running' || s.path[at + 1] === 'completed', true, s.path.join(' → '));
  }

  // Nothing applied twice: at most one charge per order, whatever was lost, asked or redelivered.
  const [charges] = await db.sql<Array<{ max: number | null; orders: number; rows: number }>>`
    SELECT max(charges) AS max, count(DISTINCT order_id)::int AS orders, count(*)::int AS rows FROM demo_payment`;
  assert.ok(charges!.max !== null && charges!.max <= 1, `charges per order: at most 1, got ${charges!.max}`);
  assert.equal(charges!.rows, charges!.orders);
  const [failures] = await db.sql<Array<{ n: number }>>`SELECT count(*)::int AS n FROM message_failure`;
  assert.equal(failures!.n, 0, 'no consumer failed an event');
  console.log(
    `# ${all.length} sagas in ${Math.round((Date.now() - started) / 1000)} s: ${counts(all)}; resolved then completed ${resolved.length}; sagas with a reply lost ${lostIn.size}`,
  );
});

test('the demo saga settings are checked once, and a wrong one names its variable and what it takes', () => {
  const read = (env: Record<string, string>) => readConfig(stack, env);
  const defaults = read({});
  assert.equal(defaults.demoSagaRate, 2);
  assert.deepEqual(defaults.demoSaga, { prefix: 'demo', refusedPayments: 0.1, lostReplies: 0.05 });
  assert.equal(read({ POSTBOX_DEMO_SAGA_RATE: '0.5' }).demoSagaRate, 0.5);
  assert.throws(
    () => read({ POSTBOX_DEMO_REFUSED_PAYMENTS: '10' }),
    /POSTBOX_DEMO_REFUSED_PAYMENTS must be a share between 0 and 1 \(e\.g\. 0\.1 for 10 %\), got "10"/,
  );
  assert.throws(() => read({ POSTBOX_DEMO_LOST_REPLIES: 'some' }), /POSTBOX_DEMO_LOST_REPLIES must be a share/);
  assert.throws(() => read({ POSTBOX_DEMO_SAGA_RATE: '-1' }), /POSTBOX_DEMO_SAGA_RATE must be a number per second ≥ 0/);
  assert.throws(() => read({ POSTBOX_DEMO_SAGA_PREFIX: 'a b' }), /POSTBOX_DEMO_SAGA_PREFIX must be a Kafka topic/);
});

function counts(all: Saga[]): string {
  const n = new Map<string, number>();
  for (const s of all) n.set(s.status, (n.get(s.status) ?? 0) + 1);
  return [...n].map(([status, c]) => `${status} ${c}`).join(', ');
}
