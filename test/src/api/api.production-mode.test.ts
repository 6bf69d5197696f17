import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readApiConfig } from '@postbox/api';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { freePort } from '@postbox/stack';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';

// The control plane's mode fails closed: POSTBOX_ENV is production or development and nothing else, production
// when unset or empty (NODE_ENV plays no part), and only `postbox start` (the demo) defaults to development.

let db: TestDatabase;
const spawned: RoleProcess[] = [];

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  for (const p of spawned) if (p.child.exitCode === null) p.kill('SIGTERM');
  await Promise.all(spawned.map((p) => p.exited));
  await db.drop();
});

function api(env: Record<string, string>): RoleProcess {
  const p = spawnPostbox(['api'], { DATABASE_URL: db.url, POSTBOX_API_TOKENS: '', LOG_LEVEL: 'warn', ...env });
  spawned.push(p);
  return p;
}

/** How a spawned `postbox api` ended up: its exit code, or 'listening' (then it is stopped). */
async function outcome(p: RoleProcess): Promise<number | null | 'listening'> {
  await waitFor(
    'the API to exit or listen',
    async () => p.child.exitCode !== null || p.output().includes('GraphQL control plane:'),
    60_000,
    100,
  );
  if (p.child.exitCode !== null) return p.child.exitCode;
  p.kill('SIGTERM');
  await p.exited;
  return 'listening';
}

test('an unknown POSTBOX_ENV is refused at start, naming the variable and the allowed values', async () => {
  for (const value of ['prod', 'Production', 'dev', 'staging']) {
    const p = api({ POSTBOX_ENV: value, NODE_ENV: 'production', POSTBOX_API_PORT: String(await freePort()) });
    const code = await outcome(p);
    assert.ok(code !== 0 && code !== 'listening', `POSTBOX_ENV=${value} must not start: ${p.output()}`);
    assert.match(
      p.output(),
      new RegExp(`POSTBOX_ENV must be production or development \\(got "${value}"\\)`),
      p.output(),
    );
    assert.doesNotMatch(p.output(), /development operator token|GraphQL control plane:/);
  }
});

test('POSTBOX_ENV empty (beside NODE_ENV=production) or unset is production: no token made up, none printed', async () => {
  const p = api({ POSTBOX_ENV: '', NODE_ENV: 'production', POSTBOX_API_PORT: String(await freePort()) });
  const code = await outcome(p);
  assert.ok(code !== 0 && code !== 'listening', `production without tokens must not start: ${p.output()}`);
  assert.match(p.output(), /POSTBOX_API_TOKENS must name at least one token in production/);
  assert.doesNotMatch(p.output(), /development operator token|Bearer dev-/);

  for (const env of [{}, { POSTBOX_ENV: '' }, { NODE_ENV: 'development' }, { POSTBOX_ENV: '', NODE_ENV: 'test' }]) {
    assert.throws(() => readApiConfig(env), /POSTBOX_API_TOKENS must name at least one token in production/);
    const config = readApiConfig({ ...env, POSTBOX_API_TOKENS: `ops:viewer:${'x'.repeat(16)}` });
    assert.equal(config.production, true, JSON.stringify(env));
    assert.equal(config.devToken, null);
  }
  const demo = readApiConfig({}, { defaultMode: 'development' });
  assert.equal(demo.production, false, 'the demo (postbox start) defaults to development');
  assert.match(demo.devToken ?? '', /^dev-/);
  assert.equal(
    readApiConfig(
      { POSTBOX_ENV: 'production', POSTBOX_API_TOKENS: `ops:viewer:${'x'.repeat(16)}` },
      { defaultMode: 'development' },
    ).production,
    true,
    'an explicit mode wins',
  );
});

test('a running `postbox api` with POSTBOX_ENV empty serves no GraphiQL and no anonymous introspection', async () => {
  const port = await freePort();
  const token = randomBytes(18).toString('base64url');
  const p = api({
    POSTBOX_ENV: '',
    NODE_ENV: 'production',
    POSTBOX_API_PORT: String(port),
    POSTBOX_API_TOKENS: `ops:viewer:${token}`,
  });
  await waitFor('the API to listen', async () => p.output().includes('GraphQL control plane:'), 60_000, 100);
  const url = `http://127.0.0.1:${port}/graphql`;
  const page = await fetch(url, { headers: { accept: 'text/html' } });
  assert.doesNotMatch(await page.text(), /graphiql/i, 'no GraphiQL');
  const introspect = async (authorization?: string) => {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(authorization ? { authorization } : {}) },
      body: JSON.stringify({ query: '{ __schema { queryType { name } } }' }),
    });
    return (await res.json()) as { data?: unknown; errors?: Array<{ message: string }> };
  };
  const anonymous = await introspect();
  assert.match(anonymous.errors?.[0]?.message ?? '', /introspection/i, JSON.stringify(anonymous));
  assert.equal(anonymous.data ?? null, null);
  const viewer = await introspect(`Bearer ${token}`);
  assert.match(viewer.errors?.[0]?.message ?? '', /introspection/i, 'introspection is for admin only');
  assert.doesNotMatch(p.output(), /development operator token|GraphiQL in a browser/);
});
