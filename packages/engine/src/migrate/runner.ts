import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { PostboxError } from '../errors.ts';
import type { Sql } from '../db/connect.ts';
import { onlineSteps, type MigrationStep } from './online.ts';

/**
 * Forward-only migrations: `NNNN_name.sql` files applied in order under one advisory lock, so processes starting at
 * once apply each file exactly once. Regular files that are missing are applied together in one transaction; an
 * online file (online.ts) is applied a step at a time, each step committed and recorded, so a long change holds no
 * lock across its steps and resumes where it stopped. A file that was applied and has since changed stops the
 * runner: history is never rewritten, a change is a new file. Each scope is a chain of its own (`postbox`, the
 * product's; `demo`, the demo's business tables), numbered from 1.
 */
export interface MigrateOptions {
  /** @defaultValue the migrations shipped inside `@postbox/engine` (`dist/migrations/`; the repository's root `migrations/` when run from source) */
  directory?: string;
  /** The chain these files belong to. @defaultValue 'postbox' */
  scope?: string;
  log?: (line: string) => void;
  /**
   * How long an online step waits for a lock before it lets go and tries again (writers queue behind it).
   * @defaultValue 2000
   */
  lockTimeoutMs?: number;
  /** Attempts of an online step that could not get its locks, 1 s apart. @defaultValue 30 */
  lockAttempts?: number;
  /** Stops after this version (an upgrade tested from an older schema). @defaultValue every file */
  target?: number;
}

/**
 * Versions that left a chain: the product's 0004 and 0005 created the demo's tables, which belong to the `demo`
 * scope. Installations that applied them keep their rows; new ones never see the files.
 */
const RETIRED: Readonly<Record<string, ReadonlySet<number>>> = { postbox: new Set([4, 5]) };

export interface MigrationFile {
  version: number;
  name: string;
  checksum: string;
  text: string;
}

const LOCK_KEY = 0x706f7374; // "post": one lock for every Postbox migrator on this database
const FILE = /^(\d{4})_([a-z0-9_]+)\.sql$/;

/**
 * The repository keeps the migrations at its root, beside `packages/` (the design card's layout); the engine's build
 * copies them into `dist/migrations/` (scripts/finish-build.ts), so an installed package carries every one. The
 * sources (`.ts`, run only inside the repository) read the root's; the build reads its own copy.
 */
export const defaultMigrationsDirectory = fileURLToPath(
  new URL(import.meta.url.endsWith('.ts') ? '../../../../migrations/' : '../migrations/', import.meta.url),
);

export async function readMigrations(
  directory = defaultMigrationsDirectory,
  scope = 'postbox',
): Promise<MigrationFile[]> {
  const names = (await readdir(directory)).filter((n) => n.endsWith('.sql')).sort();
  const files: MigrationFile[] = [];
  for (const fileName of names) {
    const match = FILE.exec(fileName);
    if (!match)
      throw new PostboxError('migration_name', 'permanent', `migration file "${fileName}" must be named NNNN_name.sql`);
    const text = await readFile(`${directory}/${fileName}`, 'utf8');
    files.push({
      version: Number(match[1]),
      name: match[2]!,
      checksum: createHash('sha256').update(text).digest('hex'),
      text,
    });
  }
  const retired = RETIRED[scope] ?? new Set<number>();
  let expected = 1;
  for (const f of files) {
    while (retired.has(expected)) expected++;
    if (f.version !== expected) {
      throw new PostboxError(
        'migration_gap',
        'permanent',
        `migration ${f.version}_${f.name} breaks the sequence: expected ${expected}`,
      );
    }
    expected++;
  }
  return files;
}

/**
 * Applies what is missing under a session advisory lock held on one connection: a second migrator waits, then
 * finds nothing to do. Regular files go in one transaction per run of consecutive ones (all or none of them); an
 * online file step by step (applyOnline). Nothing is applied when a file applied before has changed.
 * Returns the versions applied by this call.
 */
export async function migrate(sql: Sql, options: MigrateOptions = {}): Promise<number[]> {
  const log = options.log ?? (() => {});
  const scope = options.scope ?? 'postbox';
  const all = await readMigrations(options.directory, scope);
  const files = options.target === undefined ? all : all.filter((f) => f.version <= options.target!);
  const done: MigrationFile[] = [];
  const conn = await sql.reserve();
  try {
    await conn`SELECT pg_advisory_lock(${LOCK_KEY})`;
    try {
      const applied = await inTransaction(conn, async () => {
        await ensureLedger(conn);
        return conn<{ version: number; checksum: string }[]>`
          SELECT version, checksum FROM postbox_migration WHERE scope = ${scope}`;
      });
      const pending = unapplied(files, new Map(applied.map((r) => [r.version, r.checksum])), scope);
      let regular: MigrationFile[] = [];
      for (const file of pending) {
        const steps = onlineSteps(`${file.version}_${file.name}.sql`, file.text);
        if (!steps) {
          regular.push(file);
          continue;
        }
        done.push(...(await applyRegular(conn, scope, regular)));
        regular = [];
        await applyOnline(conn, scope, file, steps, options, log);
        done.push(file);
      }
      done.push(...(await applyRegular(conn, scope, regular)));
    } finally {
      await conn`SELECT pg_advisory_unlock(${LOCK_KEY})`.catch(() => {});
    }
  } finally {
    conn.release();
  }
  for (const f of done)
    log(`applied ${scope === 'postbox' ? '' : `${scope} `}${String(f.version).padStart(4, '0')}_${f.name}`);
  if (done.length === 0) log(`${scope === 'postbox' ? '' : `${scope} `}up to date (${files.length} migrations)`);
  return done.map((f) => f.version);
}

/**
 * The files of the chain not applied yet, without applying anything or creating the ledger (`postbox migrate
 * --check`). Throws, as migrate() does, when a file applied before has changed.
 */
export async function pendingMigrations(
  sql: Sql,
  options: Pick<MigrateOptions, 'directory' | 'scope'> = {},
): Promise<MigrationFile[]> {
  const scope = options.scope ?? 'postbox';
  const files = await readMigrations(options.directory, scope);
  const [ledger] = await sql<{ exists: boolean }[]>`SELECT to_regclass('postbox_migration') IS NOT NULL AS exists`;
  if (!ledger!.exists) return files;
  const applied = await sql<{ version: number; checksum: string }[]>`
    SELECT version, checksum FROM postbox_migration WHERE scope = ${scope}`;
  return unapplied(files, new Map(applied.map((r) => [r.version, r.checksum])), scope);
}

type Reserved = Awaited<ReturnType<Sql['reserve']>>;

/** BEGIN … COMMIT on the reserved connection (postgres.js's begin() would lease another connection). */
async function inTransaction<T>(conn: Reserved, fn: () => Promise<T>): Promise<T> {
  await conn.unsafe('BEGIN');
  try {
    const result = await fn();
    await conn.unsafe('COMMIT');
    return result;
  } catch (cause) {
    await conn.unsafe('ROLLBACK').catch(() => {});
    throw cause;
  }
}

/** The files still to apply, in order; throws (nothing applied) when one applied before has changed since. */
function unapplied(files: MigrationFile[], applied: Map<number, string>, scope: string): MigrationFile[] {
  for (const file of files) {
    const checksum = applied.get(file.version);
    if (checksum !== undefined && checksum !== file.checksum) {
      throw new PostboxError(
        'migration_changed',
        'permanent',
        `${scope} migration ${file.version}_${file.name} was changed after it was applied; add a new migration instead`,
      );
    }
  }
  return files.filter((f) => !applied.has(f.version));
}

/** Regular files in one transaction: every one of them is applied, or none. */
async function applyRegular(conn: Reserved, scope: string, files: MigrationFile[]): Promise<MigrationFile[]> {
  if (files.length === 0) return [];
  await inTransaction(conn, async () => {
    for (const file of files) {
      try {
        await conn.unsafe(file.text).simple();
      } catch (cause) {
        throw new PostboxError(
          'migration_failed',
          'permanent',
          `${scope} migration ${file.version}_${file.name} failed: ${(cause as Error).message}`,
          { cause },
        );
      }
      await recordFile(conn, scope, file);
    }
  });
  return files;
}

async function recordFile(conn: Reserved, scope: string, file: MigrationFile): Promise<void> {
  await conn`INSERT INTO postbox_migration (scope, version, name, checksum) VALUES (${scope}, ${file.version}, ${file.name}, ${file.checksum})`;
}

const LOCK_NOT_AVAILABLE = '55P03';

/**
 * An online file: each step not yet recorded runs with a lock timeout — a step that cannot get its locks lets go
 * (so the writers queued behind it go on) and tries again a second later, up to `lockAttempts` times. A step in a
 * transaction is recorded in that transaction; a no-transaction step just after it. The file is recorded after
 * its last step. A step recorded before whose text has changed stops the runner, as a changed file does.
 */
async function applyOnline(
  conn: Reserved,
  scope: string,
  file: MigrationFile,
  steps: MigrationStep[],
  options: MigrateOptions,
  log: (line: string) => void,
): Promise<void> {
  const label = `${scope} migration ${file.version}_${file.name}`;
  const recorded = await conn<{ step: string; checksum: string }[]>`
    SELECT step, checksum FROM postbox_migration_step WHERE scope = ${scope} AND version = ${file.version}`;
  const stepsDone = new Map(recorded.map((r) => [r.step, r.checksum]));
  const timeoutMs = Math.max(1, Math.trunc(options.lockTimeoutMs ?? 2000));
  const attempts = Math.max(1, options.lockAttempts ?? 30);
  await conn.unsafe(`SET lock_timeout = '${timeoutMs}ms'`);
  try {
    for (const step of steps) {
      const before = stepsDone.get(step.name);
      if (before !== undefined) {
        if (before !== step.checksum)
          throw new PostboxError(
            'migration_changed',
            'permanent',
            `${label}, step ${step.name} was changed after it was applied`,
          );
        continue;
      }
      for (let attempt = 1; ; attempt++) {
        try {
          const started = performance.now();
          await runStep(conn, scope, file.version, step);
          log(`${label}: step ${step.name} done in ${Math.round(performance.now() - started)} ms`);
          break;
        } catch (cause) {
          const waited = (cause as { code?: string }).code === LOCK_NOT_AVAILABLE;
          if (waited && attempt < attempts) {
            log(
              `${label}: step ${step.name} could not get its locks in ${timeoutMs} ms (attempt ${attempt}); trying again`,
            );
            await new Promise((r) => setTimeout(r, 1000));
            continue;
          }
          const why = waited
            ? `could not get its locks in ${attempts} attempts of ${timeoutMs} ms`
            : (cause as Error).message;
          throw new PostboxError('migration_failed', 'permanent', `${label}, step ${step.name} failed: ${why}`, {
            cause,
          });
        }
      }
    }
    await recordFile(conn, scope, file);
  } finally {
    await conn.unsafe('RESET lock_timeout').catch(() => {});
  }
}

async function runStep(conn: Reserved, scope: string, version: number, step: MigrationStep): Promise<void> {
  const record = () => conn`
    INSERT INTO postbox_migration_step (scope, version, step, checksum)
    VALUES (${scope}, ${version}, ${step.name}, ${step.checksum})
    ON CONFLICT DO NOTHING`;
  if (!step.transaction) {
    await conn.unsafe(step.sql).simple();
    await record();
    return;
  }
  await inTransaction(conn, async () => {
    await conn.unsafe(step.sql).simple();
    await record();
  });
}

/**
 * The runner's own table, created or brought up to date under the lock: before scopes, it was keyed by version
 * alone; its rows then all belong to the product chain.
 */
async function ensureLedger(tx: Reserved): Promise<void> {
  await tx`
    CREATE TABLE IF NOT EXISTS postbox_migration (
      scope text NOT NULL DEFAULT 'postbox',
      version integer NOT NULL,
      name text NOT NULL,
      checksum text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (scope, version)
    )`;
  await tx`ALTER TABLE postbox_migration ADD COLUMN IF NOT EXISTS scope text NOT NULL DEFAULT 'postbox'`;
  await tx`
    CREATE TABLE IF NOT EXISTS postbox_migration_step (
      scope text NOT NULL,
      version integer NOT NULL,
      step text NOT NULL,
      checksum text NOT NULL,
      done_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (scope, version, step)
    )`;
  const [key] = await tx<{ columns: number }[]>`
    SELECT i.indnkeyatts::int AS columns FROM pg_index i
    WHERE i.indrelid = 'postbox_migration'::regclass AND i.indisprimary`;
  if (key?.columns === 1) {
    await tx`ALTER TABLE postbox_migration DROP CONSTRAINT postbox_migration_pkey, ADD PRIMARY KEY (scope, version)`;
  }
}
