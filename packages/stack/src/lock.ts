import fs from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { StackError } from './errors.ts';
import { isAlive, readPidFile } from './process.ts';

/**
 * Serialises `up` and `down` across processes (the test and bench packages may both call `stackUp()` at once),
 * so two callers never start the same server twice. `mkdir` is atomic, so it is the lock; the pid inside lets a
 * lock left by a crashed process be taken over.
 */
export async function withStackLock<T>(lockDir: string, timeoutMs: number, body: () => Promise<T>): Promise<T> {
  const ownerFile = path.join(lockDir, 'pid');
  const deadline = Date.now() + timeoutMs;
  await fs.mkdir(path.dirname(lockDir), { recursive: true });
  for (;;) {
    try {
      await fs.mkdir(lockDir);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const owner = await readPidFile(ownerFile);
    if (owner === undefined) {
      // Between another process's mkdir and its pid write; give it a moment before calling it stale.
      const stat = await fs.stat(lockDir).catch(() => undefined);
      if (stat && Date.now() - stat.mtimeMs > 5000) await fs.rm(lockDir, { recursive: true, force: true });
    } else if (!isAlive(owner)) {
      await fs.rm(lockDir, { recursive: true, force: true });
      continue;
    }
    if (Date.now() >= deadline) {
      throw new StackError(
        'locked',
        `another postbox stack command (pid ${owner ?? 'unknown'}) holds ${lockDir}; wait for it or remove the directory if no such process runs`,
      );
    }
    await sleep(200);
  }
  try {
    await fs.writeFile(ownerFile, `${process.pid}\n`);
    return await body();
  } finally {
    await fs.rm(lockDir, { recursive: true, force: true });
  }
}
