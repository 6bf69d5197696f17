import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { PostboxError } from '../errors.ts';
import type { Sql } from '../db/connect.ts';

/**
 * Forward-only migrations: `migrations/NNNN_name.sql`, applied in order, each in its own transaction, all under
 * one advisory lock so that processes starting at once apply each file exactly once. A file that was applied
 * and has since changed stops the runner: history is never rewritten, a change is a new file.
 */
export interface MigrateOptions {
  /** @defaultValue the repository's `migrations/` folder */
  directory?: string;
  log?: (line: string) => void;
}

export interface MigrationFile {
  version: number;
  name: string;
  checksum: string;
  text: string;
}

const LOCK_KEY = 0x706f7374; // "post": one lock for every Postbox migrator on this database
const FILE = /^(\d{4})_([a-z0-9_]+)\.sql$/;

export const defaultMigrationsDirectory = fileURLToPath(new URL('../../../../migrations', import.meta.url));

export async function readMigrations(directory = defaultMigrationsDirectory): Promise<MigrationFile[]> {
  const names = (await readdir(directory)).filter((n) => n.endsWith('.sql')).sort();
  const files: MigrationFile[] = [];
  for (const fileName of names) {
    const match = FILE.exec(fileName);
    if (!match) throw new PostboxError('migration_name', 'permanent', `migration file "${fileName}" must be named NNNN_name.sql`);
    const text = await readFile(`${directory}/${fileName}`, 'utf8');
    files.push({
      version: Number(match[1]),
      name: match[2]!,
      checksum: createHash('sha256').update(text).digest('hex'),
      text,
    });
  }
  files.forEach((f, i) => {
    if (f.version !== i + 1) {
      throw new PostboxError('migration_gap', 'permanent', `migration ${f.version}_${f.name} breaks the sequence: expected ${i + 1}`);
    }
  });
  return files;
}

/**
 * Applies what is missing, all in one transaction under a transaction-scoped advisory lock: either every
 * missing file is applied or none is, and a second migrator waits, then finds nothing to do.
 * Returns the versions applied by this call.
 */
export async function migrate(sql: Sql, options: MigrateOptions = {}): Promise<number[]> {
  const log = options.log ?? (() => {});
  const files = await readMigrations(options.directory);
  const done: number[] = [];
  await sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(${LOCK_KEY})`;
    await tx`
      CREATE TABLE IF NOT EXISTS postbox_migration (
        version integer PRIMARY KEY,
        name text NOT NULL,
        checksum text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`;
    const rows = await tx<{ version: number; checksum: string }[]>`SELECT version, checksum FROM postbox_migration`;
    const applied = new Map(rows.map((r) => [r.version, r.checksum]));
    for (const file of files) {
      const checksum = applied.get(file.version);
      if (checksum !== undefined) {
        if (checksum !== file.checksum) {
          throw new PostboxError(
            'migration_changed',
            'permanent',
            `migration ${file.version}_${file.name} was changed after it was applied; add a new migration instead`,
          );
        }
        continue;
      }
      try {
        await tx.unsafe(file.text).simple();
      } catch (cause) {
        throw new PostboxError('migration_failed', 'permanent', `migration ${file.version}_${file.name} failed: ${(cause as Error).message}`, { cause });
      }
      await tx`INSERT INTO postbox_migration (version, name, checksum) VALUES (${file.version}, ${file.name}, ${file.checksum})`;
      done.push(file.version);
    }
  });
  for (const v of done) log(`applied ${String(v).padStart(4, '0')}_${files[v - 1]!.name}`);
  if (done.length === 0) log(`up to date (${files.length} migrations)`);
  return done;
}
