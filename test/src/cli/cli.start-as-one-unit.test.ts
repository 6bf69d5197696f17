import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import { freePort } from '@postbox/stack';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// `postbox start` starts its roles as one unit (issue: a second `npm start` on a taken port once left the relay,
// the consumer and the demo running against closed pools for ever, 17,000 log lines, deaf to SIGTERM).
let db: TestDatabase;
let env: Record<string, string>;
const running: RoleProcess[] = [];

before(async () => {
  db = await freshDatabase();
  env = {
    DATABASE_URL: db.url,
    REDIS_URL: stack.REDIS_URL,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
    POSTBOX_TOPICS: `start-unit-${randomBytes(4).toString('hex')}:2`,
    POSTBOX_API_PORT: String(await freePort()),
    POSTBOX_DEMO_RATE: '20',
    POSTBOX_RELAY_THREADS: '0',
    LOG_LEVEL: 'warn',
  };
});

after(async () => {
  for (const p of running) {
    p.kill('SIGKILL');
    await p.exited;
  }
  await db.drop();
});

function start(): RoleProcess {
  const p = spawnPostbox(['start'], env);
  running.push(p);
  return p;
}

async function leases(): Promise<Array<{ owner: string | null; n: number }>> {
  const rows = await db.sql<{ owner: string | null; n: number }[]>`
    SELECT owner, count(*)::int AS n FROM relay_lane WHERE lease_until > now() GROUP BY owner ORDER BY owner`;
  return [...rows];
}

async function relays(): Promise<string[]> {
  return (await db.sql<{ owner: string }[]>`SELECT owner FROM relay_instance ORDER BY owner`).map((r) => r.owner);
}

test('a second start on a taken port stops every part it started, says why in one line, and exits 1', async () => {
  const first = start();
  const owner = await waitFor(
    'the first start to run',
    async () => {
      if (first.child.exitCode !== null)
        throw new Error(`the first start exited ${first.child.exitCode}:\n${first.output()}`);
      return /postbox running: relay (\S+)/.exec(first.output())?.[1];
    },
    120_000,
  );
  await waitFor('the first relay to hold every lane', async () => {
    const held = await leases();
    return held.length === 1 && held[0]!.owner === owner && held[0]!.n === 16;
  });

  const second = start();
  const code = await exitWithin(second, 60_000);
  const out = second.output();
  if (process.env.POSTBOX_TEST_SHOW) console.log(out);
  assert.equal(code, 1, `the second start exits 1, got ${code}; it printed:\n${out}`);
  const port = env.POSTBOX_API_PORT!;
  assert.match(out, new RegExp(`postbox: port ${port} is in use: set POSTBOX_API_PORT or stop the other process`));
  assert.doesNotMatch(out, /CONNECTION_ENDED|CONNECTION_DESTROYED/, 'no part kept running against closed pools');
  assert.doesNotMatch(out, /postbox running/);

  // Nothing of the second is left: only the first relay is registered and it holds every lane (the second's
  // relay joined, took its share, and handed it back when it stopped).
  assert.deepEqual(await relays(), [owner]);
  await waitFor('the first relay to hold every lane again', async () => {
    const held = await leases();
    return held.length === 1 && held[0]!.owner === owner && held[0]!.n === 16;
  });

  // The first is untouched by all of this and still stops cleanly.
  const before = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM demo_order`;
  await waitFor('the first to keep writing', async () => {
    const [now] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM demo_order`;
    return now!.n > before[0]!.n;
  });
  first.kill('SIGTERM');
  assert.equal(await first.exited, 0, first.output());
  assert.match(first.output(), /stopped cleanly/);
  assert.deepEqual(await relays(), []);
  assert.deepEqual(await leases(), []);
});

test('a stop signal while the parts start is honoured: what started stops, nothing is left behind', async () => {
  const p = start();
  await waitFor('the migrations to run', async () => p.output().includes('migrate: up to date'), 120_000, 20);
  p.kill('SIGTERM');
  const code = await exitWithin(p, 60_000);
  assert.equal(code, 0, `exits 0 after a stop during start-up, got ${code}:\n${p.output()}`);
  assert.doesNotMatch(p.output(), /postbox running/);
  assert.deepEqual(await relays(), []);
  assert.deepEqual(await leases(), []);
});

/** The exit code, or 'hung' when the process is still running after `ms` (a bound, not a timing assertion). */
async function exitWithin(p: RoleProcess, ms: number): Promise<number | null | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((resolve) => (timer = setTimeout(() => resolve('hung'), ms)));
  try {
    return await Promise.race([p.exited, hung]);
  } finally {
    clearTimeout(timer);
  }
}
