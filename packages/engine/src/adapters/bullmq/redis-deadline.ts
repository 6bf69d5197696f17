import { PostboxError } from '../../errors.ts';

/**
 * A Redis call bounded in time. BullMQ waits for its connection to be ready before it sends anything, and ioredis
 * reconnects for ever, so with Redis down a call would wait as long as Redis stays away; with Redis silent (a
 * partition, a stopped server) a sent command waits as long as TCP retries. The retry ledger keeps the truth and
 * reconciliation re-enqueues what a failed call left out, so a caller is better told at once: a transient
 * `scheduler_unavailable`. The call itself may still complete later — job ids are deterministic, so that is
 * harmless.
 */
const UNREACHABLE =
  /Stream isn't writeable|Connection is closed|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|EPIPE/;

function unreachable(cause: unknown): boolean {
  if (cause instanceof PostboxError) return cause.code === 'scheduler_unavailable';
  const e = cause as { message?: string; code?: string };
  return UNREACHABLE.test(`${e?.code ?? ''} ${e?.message ?? ''}`);
}

export async function withinRedisDeadline<T>(
  call: Promise<T>,
  timeoutMs: number,
  what: string,
  /** Whether the client is not connected right now: any error then is Redis being away. */
  disconnected: () => boolean = () => false,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new PostboxError(
            'scheduler_unavailable',
            'transient',
            `Redis (the retry scheduler) did not answer within ${timeoutMs} ms: ${what}`,
          ),
        ),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([call, late]);
  } catch (cause) {
    // Only Redis being unreachable is rewrapped; any other error (a refused job, a script error) stays as it is.
    if (!unreachable(cause) && !disconnected()) throw cause;
    throw new PostboxError(
      'scheduler_unavailable',
      'transient',
      `Redis (the retry scheduler) is unreachable: ${what}`,
      {
        cause,
      },
    );
  } finally {
    clearTimeout(timer);
  }
}
