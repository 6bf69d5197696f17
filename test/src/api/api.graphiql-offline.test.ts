import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  createApiResources,
  createControlPlaneHandler,
  readApiConfig,
  readConfig,
  startControlPlane,
  type ApiConfig,
  type ApiResources,
  type ControlPlane,
} from '@postbox/api';
import { launchBrowser, type TestBrowser } from '../support/browser.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { stack } from '../support/stack.ts';

// GraphiQL as an operator meets it after `npm start`, with no network beyond this server: every request to
// another origin is aborted and recorded, so a page that still needs a CDN fails here instead of showing
// "Loading…". The query needs the development operator token (health checks need the viewer scope), so an
// answer in the result pane also proves the header typed into GraphiQL's headers editor was sent.

// POSTBOX_TEST_SCREENSHOT=1 refreshes the picture in the docs; otherwise it goes to the temp folder (every run
// has a new token and port, so writing the docs copy each time would dirty the tree).
const SCREENSHOT = process.env.POSTBOX_TEST_SCREENSHOT
  ? fileURLToPath(new URL('../../../docs/images/graphiql-offline.png', import.meta.url))
  : join(tmpdir(), `postbox-graphiql-offline-${process.pid}.png`);
const QUERY = '{ health { ready checks { name ok } } }';

let db: TestDatabase;
let resources: ApiResources;
let plane: ControlPlane;
let config: ApiConfig;
let browser: TestBrowser;

before(async () => {
  db = await freshDatabase();
  // Development configuration from an empty environment, as `npm start` reads it: GraphiQL on, one operator token.
  config = readApiConfig({ POSTBOX_API_PORT: '0' }, { defaultMode: 'development' });
  resources = createApiResources(readConfig(stack, { POSTBOX_TOPICS: 'api.unused:1' }));
  plane = await startControlPlane(config, resources.deps);
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await plane?.close();
  await resources?.close();
  await db?.drop();
});

test('GraphiQL loads and runs a query with no origin but the server’s own, under a policy it never violates', async () => {
  assert.equal(config.production, false);
  assert.match(config.devToken ?? '', /^dev-/, 'development generates an operator token');
  const origin = new URL(plane.url).origin;
  const foreign = new Set<string>();
  const consoleErrors: string[] = [];
  const { context } = browser;

  await context.route('**/*', (route) => {
    const url = route.request().url();
    if (new URL(url).origin === origin) return route.continue();
    foreign.add(url);
    return route.abort('blockedbyclient');
  });
  // Requests the router may not see (a worker's own) are still listed here.
  context.on('request', (request) => {
    const url = new URL(request.url());
    if (url.protocol !== 'data:' && url.protocol !== 'blob:' && url.origin !== origin) foreign.add(request.url());
  });
  // Runs before the page's scripts, injected by the browser's debugging protocol, which the page's policy
  // does not govern.
  await context.addInitScript(`
    globalThis.__cspViolations = [];
    addEventListener('securitypolicyviolation', (e) => globalThis.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));
  `);

  const page = await context.newPage();
  page.on('console', (message) => {
    if (message.type() === 'error') consoleErrors.push(message.text());
  });
  page.on('pageerror', (error) => consoleErrors.push(`uncaught: ${error.message}`));

  const violations = async () => (await page.evaluate('globalThis.__cspViolations')) as string[];
  /** What went wrong when GraphiQL does not come up: it is nearly always one of these. */
  const diagnosis = async () =>
    `requests to other origins: ${JSON.stringify([...foreign])}; policy violations: ${JSON.stringify(await violations())}; console errors: ${JSON.stringify(consoleErrors)}`;

  // The page's scripts and stylesheet are requested before `load`: a CDN page fails here.
  const document = await page.goto(`${plane.url}?query=${encodeURIComponent(QUERY)}`);
  assert.equal(document?.status(), 200);
  assert.deepEqual([...foreign], [], 'the page asks no other origin for anything');
  const csp = document?.headers()['content-security-policy'] ?? '';
  const scriptSrc = /(?:^|;)\s*script-src ([^;]*)/.exec(csp)?.[1];
  assert.equal(scriptSrc, "'self'", `the page admits only its own scripts: ${csp}`);
  assert.match(csp, /default-src 'none'/);
  assert.equal(await page.title(), 'Postbox control plane');

  // Monaco editors are ready once their text is drawn.
  const queryEditor = page.locator('.graphiql-query-editor .view-lines');
  await queryEditor
    .filter({ hasText: 'health' })
    .waitFor({ timeout: 30_000 })
    .catch(async (cause: unknown) => assert.fail(new Error(`GraphiQL did not start: ${await diagnosis()}`, { cause })));

  await page.locator('.graphiql-editor-tools button[data-name="headers"]').click();
  const headersEditor = page.locator(
    'section.graphiql-editor-tool[aria-label="Headers"] .graphiql-editor:not(.hidden)',
  );
  const headersText = async () => text(await headersEditor.locator('.view-lines').innerText()).trim();
  assert.equal(await headersText(), '{"Authorization":"Bearer <token>"}', 'the page offers a header to fill in');
  // As an operator would: select the placeholder and put the token there. Typing the whole JSON instead
  // fights the editor, which closes every quote and brace it sees opened.
  await headersEditor.click();
  await page.keyboard.press('ControlOrMeta+End');
  for (const _ of '"}') await page.keyboard.press('ArrowLeft');
  for (const _ of '<token>') await page.keyboard.press('Shift+ArrowLeft');
  await page.keyboard.insertText(config.devToken!);
  assert.equal(await headersText(), JSON.stringify({ Authorization: `Bearer ${config.devToken}` }));

  const answered = page.waitForResponse(
    (r) =>
      r.url() === plane.url && r.request().method() === 'POST' && (r.request().postData() ?? '').includes('checks'),
  );
  await page.locator('.graphiql-execute-button').click();
  const answer = await (await answered).json();
  assert.equal(answer.errors, undefined, `the token was accepted: ${JSON.stringify(answer.errors)}`);
  assert.deepEqual(answer.data.health.checks.map((c: { name: string }) => c.name).sort(), [
    'kafka',
    'postgres',
    'redis',
  ]);

  const result = page.locator('.result-window .view-lines');
  await result.filter({ hasText: 'postgres' }).waitFor({ timeout: 15_000 });
  const shown = text(await result.innerText());
  for (const name of ['"health"', '"ready"', '"checks"', '"postgres"', '"kafka"', '"redis"'])
    assert.ok(shown.includes(name), `the result pane shows ${name}: ${shown}`);
  assert.doesNotMatch(shown, /FORBIDDEN|"errors"/);

  await mkdir(dirname(SCREENSHOT), { recursive: true });
  await page.screenshot({ path: SCREENSHOT });

  assert.deepEqual([...foreign], [], 'no request left the server');
  assert.deepEqual(await violations(), [], 'no content security policy violation');
  assert.deepEqual(
    consoleErrors.filter((e) => /Content Security Policy|Refused to/i.test(e)),
    [],
    'no policy errors in the console',
  );
  assert.deepEqual(consoleErrors, [], 'no console errors at all');
  await page.close();
});

test('production serves neither the page nor its files', async () => {
  const production = createControlPlaneHandler({ ...config, production: true }, resources.deps);
  const page = await production.fetch('http://localhost/graphql', { headers: { accept: 'text/html' } });
  assert.doesNotMatch(await page.text(), /graphiql/i);
  for (const file of ['graphiql.js', 'start.js', 'graphiql.css', 'graphql.worker.js']) {
    const res = await production.fetch(`http://localhost/graphiql/${file}`);
    await res.arrayBuffer();
    assert.equal(res.status, 404, file);
  }
});

/** Monaco draws spaces as no-break spaces. */
function text(drawn: string): string {
  return drawn.replace(/\u00a0/g, ' ');
}
