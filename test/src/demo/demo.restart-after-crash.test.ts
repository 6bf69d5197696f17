import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import { freePort } from '@postbox/stack';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// `npm start` right after a `kill -9` of the previous one (issue 46): each consumer group holds the dead members'
// partitions until their session ends, and the start says what it waits on and for about how long instead of
// printing nothing. And a start with POSTBOX_DEMO_SAGA_RATE=0 starts no saga but runs the saga's roles while any
// is unfinished, so the sagas the killed run left in flight reach their end.
let db: TestDatabase;
const running: RoleProcess[] = [];

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  for (const p of running) if (p.child.exitCode === null) p.kill('SIGKILL');
  await Promise.all(running.map((p) => p.exited));
  await db?.drop();
});

async function sagaStatuses(): Promise<Record<string, number>> {
  const rows = await db.sql<{ status: string; n: number }[]>`
    SELECT status, count(*)::int AS n FROM saga_instance GROUP BY status`;
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

const unfinished = (s: Record<string, number>) => (s.running ?? 0) + (s.resolving ?? 0) + (s.compensating ?? 0);
const total = (s: Record<string, number>) => Object.values(s).reduce((a, b) => a + b, 0);

test('after a kill -9, a start with no new sagas says what it waits on and ends the sagas left in flight', async () => {
  const id = randomBytes(4).toString('hex');
  const env = {
    DATABASE_URL: db.url,
    REDIS_URL: stack.REDIS_URL,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
    POSTBOX_TOPICS: `demo-restart-${id}:2`,
    POSTBOX_API_PORT: String(await freePort()),
    POSTBOX_DEMO_RATE: '10',
    POSTBOX_DEMO_SAGA_RATE: '4',
    // Lost replies keep sagas in flight for a step timeout each: the kill leaves some unfinished.
    POSTBOX_DEMO_LOST_REPLIES: '0.5',
    POSTBOX_DEMO_SAGA_PREFIX: `demo-restart-${id}`,
    // A session long enough that the second start must wait for the dead members to be dropped.
    POSTBOX_KAFKA_SESSION_TIMEOUT_MS: '12000',
    POSTBOX_RELAY_THREADS: '0',
    LOG_LEVEL: 'warn',
  };
  const first = spawnPostbox(['start'], env);
  running.push(first);
  await waitFor(
    'sagas in flight',
    async () => {
      if (first.child.exitCode !== null) throw new Error(`postbox start exited:\n${first.output()}`);
      if (!first.output().includes('postbox running')) return false;
      const s = await sagaStatuses();
      return total(s) >= 10 && unfinished(s) >= 3;
    },
    180_000,
    500,
  );
  first.kill('SIGKILL');
  await first.exited;
  const left = await sagaStatuses();
  assert.ok(unfinished(left) > 0, `the kill left sagas in flight: ${JSON.stringify(left)}`);

  const second = spawnPostbox(['start'], { ...env, POSTBOX_DEMO_SAGA_RATE: '0' });
  running.push(second);
  await waitFor(
    'every saga left in flight to end',
    async () => {
      if (second.child.exitCode !== null) throw new Error(`the second start exited:\n${second.output()}`);
      return unfinished(await sagaStatuses()) === 0;
    },
    180_000,
    1000,
  ).catch((cause: unknown) => {
    throw new Error(`${(cause as Error).message}; sagas ${JSON.stringify(left)} → now, output:\n${second.output()}`, {
      cause,
    });
  });
  const out = second.output();
  assert.match(
    out,
    /waiting for the consumer groups \(.*demo-order-projection.*\) to let this run.s members join: members of a previous run that did not stop cleanly hold their partitions until their session ends, up to 12 s here/,
  );
  assert.match(out, /demo sagas: none started \(rate 0\); the saga roles run until those in flight end/);
  const after = await sagaStatuses();
  assert.equal(total(after), total(left), 'no saga started with the rate at 0');
  assert.equal(after.needs_attention ?? 0, left.needs_attention ?? 0, 'none left for an operator');
  second.kill('SIGINT');
  assert.equal(await second.exited, 0, second.output());
});
