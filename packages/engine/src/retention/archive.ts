import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Transform, Writable, type Readable, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createGzip } from 'node:zlib';
import type { Sql } from '../db/connect.ts';
import { PostboxError } from '../errors.ts';
import { tableColumns } from '../queries/retention-partitions.ts';
import { createPrivateFile, privateDirectory, publishFile, syncDirectory } from './private-file.ts';

/**
 * Archives of partitions that leave their table (docs/operations.md "Retention"): one gzip file of CSV per
 * partition — `COPY (SELECT * FROM p ORDER BY event_id) TO STDOUT (FORMAT csv, HEADER)`, so it loads back with
 * `COPY … FROM` — and a manifest beside it with the SHA-256 of the CSV and of the file, the row count and the
 * columns. Files, not an archive table: the point is a small database, and a file with its checksum is evidence
 * that fits WORM or object storage. Written to `.tmp`, fsynced, renamed: a file under its final name is whole.
 * They hold every event's data: files 0600 in 0700 folders, a temp file never opened through a link
 * (private-file.ts).
 */
export interface ArchiveManifest {
  format: 'postbox-archive/1';
  table: string;
  partition: string;
  /** The event-id time range the partition held (from null: everything before `to`). */
  range: { from: string | null; to: string };
  columns: string[];
  rows: number;
  /** SHA-256 of the CSV (what COPY sent, before compression). */
  csvSha256: string;
  file: { name: string; bytes: number; sha256: string };
  exportedAt: string;
  runId: number;
}

export interface ArchiveTarget {
  table: string;
  partition: string;
  range: { from: Date | null; to: Date };
  runId: number;
}

/** Where a partition's archive goes under `dir`. */
export function archivePath(dir: string, table: string, partition: string): string {
  return join(dir, table, `${partition}.csv.gz`);
}

/** Where its manifest goes, beside the archive. */
function manifestPathOf(dir: string, table: string, partition: string): string {
  return join(dir, table, `${partition}.manifest.json`);
}

/** Exports a detached partition (nothing writes it) to its archive and manifest; returns the manifest. */
export async function exportPartition(sql: Sql, dir: string, t: ArchiveTarget): Promise<ArchiveManifest> {
  const path = archivePath(dir, t.table, t.partition);
  const made = await privateDirectory(dirname(path));
  // A directory just made is durable once its parent is synced (made: the first directory created, if any).
  if (made) await syncDirectory(dirname(made));
  const csv = new Digest();
  const file = new Digest();
  const handle = await createPrivateFile(`${path}.tmp`);
  let source: Readable;
  try {
    source = await sql`
      COPY (SELECT * FROM ${sql(t.partition)} ORDER BY event_id) TO STDOUT (FORMAT csv, HEADER)`.readable();
  } catch (cause) {
    await handle.close();
    throw cause;
  }
  // The stream owns the handle from here: fsynced (flush) and closed when it ends, closed when it fails.
  await pipeline(source, csv, createGzip(), file, handle.createWriteStream({ flush: true }));
  await publishFile(`${path}.tmp`, path);
  const manifest: ArchiveManifest = {
    format: 'postbox-archive/1',
    table: t.table,
    partition: t.partition,
    range: { from: t.range.from?.toISOString() ?? null, to: t.range.to.toISOString() },
    columns: await tableColumns(sql, t.partition),
    rows: csv.records - 1,
    csvSha256: csv.hex(),
    file: { name: `${t.partition}.csv.gz`, bytes: file.bytes, sha256: file.hex() },
    exportedAt: new Date().toISOString(),
    runId: t.runId,
  };
  await writeSynced(manifestPathOf(dir, t.table, t.partition), `${JSON.stringify(manifest, null, 2)}\n`);
  return manifest;
}

/**
 * Reads an archive back and checks it against its manifest and the partition's own row count: the file's bytes
 * and SHA-256, the CSV's SHA-256 and records. Throws `archive_incomplete` naming what differs.
 */
export async function verifyArchive(dir: string, manifest: ArchiveManifest, expectedRows: number): Promise<void> {
  const path = archivePath(dir, manifest.table, manifest.partition);
  const file = new Digest();
  const csv = new Digest();
  try {
    await pipeline(createReadStream(path), file, createGunzip(), csv, discard());
  } catch (cause) {
    throw new PostboxError(
      'archive_incomplete',
      'permanent',
      `archive of ${manifest.partition} (${path}) is not complete: it cannot be read back (${(cause as Error).message})`,
      { cause },
    );
  }
  const problems: string[] = [];
  if (file.bytes !== manifest.file.bytes) problems.push(`file ${file.bytes} bytes ≠ manifest ${manifest.file.bytes}`);
  if (file.hex() !== manifest.file.sha256) problems.push('file SHA-256 differs from the manifest');
  if (csv.hex() !== manifest.csvSha256) problems.push('CSV SHA-256 differs from the manifest');
  if (csv.records - 1 !== expectedRows)
    problems.push(`${csv.records - 1} rows in the file ≠ ${expectedRows} in the partition`);
  if (manifest.rows !== expectedRows)
    problems.push(`manifest says ${manifest.rows} rows ≠ ${expectedRows} in the partition`);
  if (problems.length > 0)
    throw new PostboxError(
      'archive_incomplete',
      'permanent',
      `archive of ${manifest.partition} (${path}) is not complete: ${problems.join('; ')}`,
    );
}

/** The manifest beside an archive, or null when there is none. */
export async function readManifest(dir: string, table: string, partition: string): Promise<ArchiveManifest | null> {
  const path = manifestPathOf(dir, table, partition);
  try {
    return JSON.parse(await readFile(path, 'utf8')) as ArchiveManifest;
  } catch (cause) {
    if ((cause as { code?: string }).code === 'ENOENT') return null;
    throw cause;
  }
}

/**
 * Passes bytes through while hashing and counting them, and counting CSV records: newlines outside quoted
 * fields (a quoted field may hold newlines; an escaped quote "" toggles twice).
 */
class Digest extends Transform {
  readonly #hash: Hash = createHash('sha256');
  bytes = 0;
  records = 0;
  #quoted = false;

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.#hash.update(chunk);
    this.bytes += chunk.length;
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i];
      if (c === 0x22) this.#quoted = !this.#quoted;
      else if (c === 0x0a && !this.#quoted) this.records++;
    }
    done(null, chunk);
  }

  hex(): string {
    return this.#hash.copy().digest('hex');
  }
}

function discard(): Writable {
  return new Writable({ write: (_chunk, _encoding, done) => done() });
}

async function writeSynced(path: string, text: string): Promise<void> {
  const handle = await createPrivateFile(`${path}.tmp`);
  try {
    await handle.writeFile(text);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await publishFile(`${path}.tmp`, path);
}
