import type { Sql } from '../db/connect.ts';

/**
 * A session advisory lock for a job that must run once at a time across processes (a reconciliation check, a
 * retention run), taken without waiting on a connection reserved for the job's duration: keyed by
 * (hashtext(namespace), hashtext(name)). Returns: the release (unlock, then the connection back to the pool), or
 * null when another process holds it. A process that dies releases it with its connection.
 */
export async function tryLockJob(sql: Sql, namespace: string, name: string): Promise<(() => Promise<void>) | null> {
  const reserved = await sql.reserve();
  try {
    const [row] = await reserved<{ locked: boolean }[]>`
      SELECT pg_try_advisory_lock(hashtext(${namespace}), hashtext(${name})) AS locked`;
    if (!row!.locked) {
      reserved.release();
      return null;
    }
  } catch (cause) {
    reserved.release();
    throw cause;
  }
  let released = false;
  return async () => {
    if (released) return;
    released = true;
    // The connection goes back to the pool once unlocked, or once it failed (gone: the session and its lock ended
    // with it). The caller waits at most UNLOCK_WAIT_MS: on a silent network the unlock waits out its query
    // deadline, and the job (a command ending because the database is away) must not wait with it.
    const settled = reserved`SELECT pg_advisory_unlock(hashtext(${namespace}), hashtext(${name}))`.then(
      () => reserved.release(),
      () => reserved.release(),
    );
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([settled, new Promise((resolve) => (timer = setTimeout(resolve, UNLOCK_WAIT_MS)))]);
    clearTimeout(timer);
  };
}

/** How long a release waits for the unlock's answer before returning (the unlock goes on in the background). */
const UNLOCK_WAIT_MS = 5000;
