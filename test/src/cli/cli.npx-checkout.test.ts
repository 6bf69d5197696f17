import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// `npx postbox …` in a checkout runs the sources exactly as `npm run postbox -- …` does (issue 46): the package's
// bin is a launcher that runs dist/ when installed and the TypeScript sources in a checkout, passing its
// arguments, exit code and signals through.
const root = fileURLToPath(new URL('../../../', import.meta.url));
let db: TestDatabase;

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  await db.drop();
});

/** `npx postbox …`, or with `direct` the linked bin npx runs (so that a signal reaches the launcher, not npm). */
function npx(args: string[], env: Record<string, string> = {}, direct = false) {
  const [command, prefix] = direct ? [`${root}node_modules/.bin/postbox`, []] : ['npx', ['--no-install', 'postbox']];
  const child = spawn(command, [...prefix, ...args], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exited, output: () => output };
}

test('npx postbox runs in a checkout: help, a command against the database, its exit code', async () => {
  const help = npx(['--help']);
  assert.equal(await help.exited, 0, help.output());
  assert.match(help.output(), /usage: postbox <command>/);
  assert.match(help.output(), /migrate/);

  const check = npx(['migrate', '--check'], { DATABASE_URL: db.url });
  assert.equal(await check.exited, 0, check.output());
  assert.match(check.output(), /up to date: nothing pending/);

  const unknown = npx(['no-such-command']);
  assert.notEqual(await unknown.exited, 0, 'an unknown command fails');
  assert.match(unknown.output(), /no-such-command/);
});

test('a SIGTERM to the postbox launcher stops the command gracefully', async () => {
  const relay = npx(
    ['relay'],
    {
      DATABASE_URL: db.url,
      REDIS_URL: stack.REDIS_URL,
      KAFKA_BROKERS: stack.KAFKA_BROKERS,
      POSTBOX_TOPICS: `npx-${randomBytes(4).toString('hex')}:1`,
      POSTBOX_RELAY_THREADS: '0',
      LOG_LEVEL: 'info',
    },
    true,
  );
  await waitFor('the relay to run', async () => /relay .*started|lanes/i.test(relay.output()), 60_000, 200);
  relay.child.kill('SIGTERM');
  assert.equal(await relay.exited, 0, relay.output());
  const [row] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM relay_instance`;
  assert.equal(row!.n, 0, 'the relay deregistered on its way out');
});
