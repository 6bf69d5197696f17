import { ConfigError, type Logger } from '@postbox/engine';
import { backoffDelayMs, classify } from '@postbox/engine/runtime';

/**
 * Runs `start` until it resolves, again after a backoff while it fails for a reason that passes (the broker or
 * PostgreSQL not reachable yet: a transient failure), as the relay waits for its topics: a role whose broker is
 * away while it starts — started beside it, or restarted by a supervisor during a broker failover — starts once the
 * broker is back instead of exiting. A permanent failure (a bad configuration, a handler module that does not
 * load) is thrown at once. Returns null when `signal` aborted first.
 */
export async function startWhenReady<T>(
  what: string,
  start: () => Promise<T>,
  o: { signal: AbortSignal; log: Logger },
): Promise<T | null> {
  for (let attempt = 0; !o.signal.aborted; attempt++) {
    try {
      return await start();
    } catch (cause) {
      if (cause instanceof ConfigError || classify(cause).kind !== 'transient' || o.signal.aborted) throw cause;
      const delay = Math.max(250, backoffDelayMs(attempt));
      if (attempt === 0 || attempt % 10 === 0)
        o.log.warn(
          { err: (cause as Error).message, retryInMs: delay, attempt },
          `${what} could not start (a dependency is not ready); trying again`,
        );
      await abortableDelay(delay, o.signal);
    }
  }
  return null;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function abortableDelay(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
