import { constants } from 'node:fs';
import { chmod, lstat, mkdir, open, rename, unlink, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { PostboxError } from '../errors.ts';

/**
 * Files that hold events' data (archives, manifests) are readable by their owner only: folders 0700, files 0600,
 * whatever the process' umask lets through otherwise. A file is written under a temp name opened exclusively and
 * without following a link (O_EXCL | O_NOFOLLOW), then renamed: a link planted at the temp path (pointing at a
 * file of someone else's choosing) is never written through; it stops the write with `archive_unsafe_path`.
 */
const CREATE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
export const PRIVATE_FILE_MODE = 0o600;
export const PRIVATE_DIR_MODE = 0o700;

/**
 * Makes `dir` and its missing parents 0700 (the folders this makes, not the ones that exist), and makes `dir`
 * itself 0700 even when it existed. Refuses a `dir` that is a link. Returns the first folder it made, if any.
 */
export async function privateDirectory(dir: string): Promise<string | undefined> {
  const made = await mkdir(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  const found = await lstat(dir);
  if (!found.isDirectory())
    throw unsafe(dir, found.isSymbolicLink() ? 'exists and is a symbolic link' : 'exists and is not a folder');
  if ((found.mode & 0o777) !== PRIVATE_DIR_MODE) await chmod(dir, PRIVATE_DIR_MODE);
  return made;
}

/**
 * Opens `path` for writing as a new 0600 file. A regular file already there is the temp file of a run that died
 * before its rename: it is removed and the file made anew. Anything else there (a link, a folder) is refused.
 */
export async function createPrivateFile(path: string): Promise<FileHandle> {
  try {
    return await open(path, CREATE, PRIVATE_FILE_MODE);
  } catch (cause) {
    if ((cause as { code?: string }).code !== 'EEXIST') throw cause;
  }
  const found = await lstat(path);
  if (!found.isFile())
    throw unsafe(path, found.isSymbolicLink() ? 'exists and is a symbolic link' : 'exists and is not a regular file');
  // unlink removes a name, never what a link names; a link planted after the lstat fails the open below.
  await unlink(path);
  try {
    return await open(path, CREATE, PRIVATE_FILE_MODE);
  } catch (cause) {
    if ((cause as { code?: string }).code === 'EEXIST') throw unsafe(path, 'was made again by another process', cause);
    throw cause;
  }
}

/** Renames a written and synced temp file to its final name (a link there is replaced, not followed). */
export async function publishFile(from: string, to: string): Promise<void> {
  await rename(from, to);
  await syncDirectory(dirname(to));
}

/** A rename is durable once its directory is synced. */
export async function syncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

function unsafe(path: string, problem: string, cause?: unknown): PostboxError {
  return new PostboxError(
    'archive_unsafe_path',
    'permanent',
    `${path} ${problem}: an archive is never written through it. Look at what made it, remove it, and run retention again`,
    cause === undefined ? undefined : { cause },
  );
}
