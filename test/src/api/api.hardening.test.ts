import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestApi } from '../support/api.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { freePort } from '@postbox/stack';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';

// GraphQL hardening (issue 24): no CORS unless origins are named, security headers on every answer, mutations
// rate-limited per token (429 RATE_LIMITED with Retry-After, queries not counted, other tokens unaffected), and
// tokens revoked or added by editing the tokens file and sending SIGHUP to a running `postbox api`.
let db: TestDatabase;
let dir: string;
let api: RoleProcess | null = null;

before(async () => {
  db = await freshDatabase();
  dir = await mkdtemp(join(tmpdir(), 'postbox-tokens-'));
});

after(async () => {
  if (api && api.child.exitCode === null) api.child.kill('SIGTERM');
  await api?.exited;
  await db.drop();
  await rm(dir, { recursive: true, force: true });
});

const MUTATION =
  'mutation { retryNow(consumer: "nobody", eventId: "01900000-0000-7000-8000-000000000001") { __typename } }';

test('CORS is off unless origins are named; every answer carries the security headers', async () => {
  const closed = await startTestApi(db.url);
  const open = await startTestApi(db.url, { config: { corsOrigins: ['https://ops.example.com'] } });
  try {
    const preflight = (url: string, origin: string) =>
      fetch(url, {
        method: 'OPTIONS',
        headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization' },
      });
    const none = await preflight(closed.url, 'https://evil.example.com');
    assert.equal(none.headers.get('access-control-allow-origin'), null, 'no CORS by default');
    const named = await preflight(open.url, 'https://ops.example.com');
    assert.equal(named.headers.get('access-control-allow-origin'), 'https://ops.example.com');
    const other = await preflight(open.url, 'https://evil.example.com');
    assert.notEqual(other.headers.get('access-control-allow-origin'), 'https://evil.example.com');

    const res = await fetch(closed.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${closed.tokens.viewer}` },
      body: JSON.stringify({ query: '{ __typename }' }),
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
    assert.equal(res.headers.get('x-frame-options'), 'DENY');
    assert.equal(res.headers.get('referrer-policy'), 'no-referrer');
    assert.equal(res.headers.get('cache-control'), 'no-store');
    assert.match(res.headers.get('content-security-policy') ?? '', /default-src 'none'/);
  } finally {
    await closed.close();
    await open.close();
  }
});

test('mutations past the per-token rate answer 429 RATE_LIMITED; queries and other tokens go on', async () => {
  const limited = await startTestApi(db.url, { config: { mutationsPerMinute: 3 } });
  try {
    const codes: Array<string | undefined> = [];
    for (let i = 0; i < 4; i++) {
      // The fourth spells the scheme another way: the same token, the same bucket.
      const r =
        i < 3
          ? await limited.post(JSON.stringify({ query: MUTATION }), limited.tokens.operator)
          : await limited.post(JSON.stringify({ query: MUTATION }), null, {
              authorization: `bearer  ${limited.tokens.operator}`,
            });
      codes.push(r.json.errors?.[0]?.extensions?.code);
      if (i === 3) {
        assert.equal(r.status, 429);
        assert.match(r.json.errors[0].message, /3 a minute per token; try again in \d+ s/);
      }
    }
    assert.deepEqual(codes.slice(0, 3).includes('RATE_LIMITED'), false, `the first three run: ${codes}`);
    assert.equal(codes[3], 'RATE_LIMITED');
    const query = await limited.gql('{ __typename }', {}, limited.tokens.operator);
    assert.equal(query.errors, undefined, 'queries are not counted');
    const other = await limited.post(JSON.stringify({ query: MUTATION }), limited.tokens.admin);
    assert.notEqual(other.json.errors?.[0]?.extensions?.code, 'RATE_LIMITED', 'another token has its own bucket');
  } finally {
    await limited.close();
  }
});

test('a token revoked in the tokens file is refused after SIGHUP, a new one accepted, without a restart', async () => {
  const [oldToken, newToken] = [0, 1].map(() => randomBytes(18).toString('base64url'));
  const file = join(dir, 'tokens');
  await writeFile(file, `# operators\nalice:viewer:${oldToken}\n`);
  const port = await freePort();
  api = spawnPostbox(['api'], {
    DATABASE_URL: db.url,
    POSTBOX_API_PORT: String(port),
    POSTBOX_API_TOKENS: '',
    POSTBOX_API_TOKENS_FILE: file,
    LOG_LEVEL: 'info',
  });
  const url = `http://127.0.0.1:${port}/graphql`;
  const typename = async (token: string) => {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: '{ storage { table } }' }),
    });
    const json = (await res.json()) as { errors?: Array<{ extensions?: { code?: string } }> };
    return json.errors?.[0]?.extensions?.code ?? 'OK';
  };
  await waitFor('the API to listen', async () => api!.output().includes('GraphQL control plane:'), 60_000, 100);
  assert.equal(await typename(oldToken!), 'OK');
  assert.notEqual(await typename(newToken!), 'OK', 'not a token yet');

  // Both for a while (the rotation), then the old one gone.
  await writeFile(file, `alice:viewer:${oldToken}\nalice:viewer:${newToken}\n`);
  api.child.kill('SIGHUP');
  await waitFor('the reload', async () => (await typename(newToken!)) === 'OK', 10_000, 100);
  assert.equal(await typename(oldToken!), 'OK', 'both during the rotation');
  await writeFile(file, `alice:viewer:${newToken}\n`);
  api.child.kill('SIGHUP');
  await waitFor('the revocation', async () => (await typename(oldToken!)) !== 'OK', 10_000, 100);
  assert.equal(await typename(newToken!), 'OK');

  // A file that does not parse keeps the tokens in force.
  await writeFile(file, 'alice:nonsense\n');
  api.child.kill('SIGHUP');
  await waitFor('the refusal', async () => /API tokens not reloaded/.test(api!.output()), 10_000, 100);
  assert.equal(await typename(newToken!), 'OK');
});
