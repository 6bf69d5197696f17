import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { PostboxError } from '../errors.ts';
import type { Queryable, Sql } from '../db/connect.ts';

/**
 * Forward-only migrations: `NNNN_name.sql` files applied in order, all in one transaction under one advisory lock,
 * so processes starting at once apply each file exactly once. A file that was applied and has since changed stops
 * the runner: history is never rewritten, a change is a new file. Each scope is a chain of its own (`postbox`, the
 * product's; `demo`, the demo's business tables), numbered from 1.
 */
export interface MigrateOptions {
  /** @defaultValue the repository's `migrations/` folder */
  directory?: string;
  /** The chain these files belong to. @defaultValue 'postbox' */
  scope?: string;
  log?: (line: string) => void;
}

/**
 * Versions that left a chain: the product's 0004 and 0005 created the demo's tables, which now have their own
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

export const defaultMigrationsDirectory = fileURLToPath(new URL('../../../../migrations', import.meta.url));

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
 * Applies what is missing, all in one transaction under a transaction-scoped advisory lock: either every
 * missing file is applied or none is, and a second migrator waits, then finds nothing to do.
 * Returns the versions applied by this call.
 */
export async function migrate(sql: Sql, options: MigrateOptions = {}): Promise<number[]> {
  const log = options.log ?? (() => {});
  const scope = options.scope ?? 'postbox';
  const files = await readMigrations(options.directory, scope);
  const done: MigrationFile[] = [];
  await sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(${LOCK_KEY})`;
    await ensureLedger(tx);
    const rows = await tx<{ version: number; checksum: string }[]>`
      SELECT version, checksum FROM postbox_migration WHERE scope = ${scope}`;
    const applied = new Map(rows.map((r) => [r.version, r.checksum]));
    for (const file of files) {
      const checksum = applied.get(file.version);
      if (checksum !== undefined) {
        if (checksum !== file.checksum) {
          throw new PostboxError(
            'migration_changed',
            'permanent',
            `${scope} migration ${file.version}_${file.name} was changed after it was applied; add a new migration instead`,
          );
        }
        continue;
      }
      try {
        await tx.unsafe(file.text).simple();
      } catch (cause) {
        throw new PostboxError(
          'migration_failed',
          'permanent',
          `${scope} migration ${file.version}_${file.name} failed: ${(cause as Error).message}`,
          { cause },
        );
      }
      await tx`INSERT INTO postbox_migration (scope, version, name, checksum) VALUES (${scope}, ${file.version}, ${file.name}, ${file.checksum})`;
      done.push(file);
    }
  });
  for (const f of done)
    log(`applied ${scope === 'postbox' ? '' : `${scope} `}${String(f.version).padStart(4, '0')}_${f.name}`);
  if (done.length === 0) log(`${scope === 'postbox' ? '' : `${scope} `}up to date (${files.length} migrations)`);
  return done.map((f) => f.version);
}

/**
 * The runner's own table, created or brought up to date under the lock: before scopes, it was keyed by version
 * alone; its rows then all belong to the product chain.
 */
async function ensureLedger(tx: Queryable): Promise<void> {
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
  const [key] = await tx<{ columns: number }[]>`
    SELECT i.indnkeyatts::int AS columns FROM pg_index i
    WHERE i.indrelid = 'postbox_migration'::regclass AND i.indisprimary`;
  if (key?.columns === 1) {
    await tx`ALTER TABLE postbox_migration DROP CONSTRAINT postbox_migration_pkey, ADD PRIMARY KEY (scope, version)`;
  }
}
