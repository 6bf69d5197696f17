import { PostboxError } from '../errors.ts';

/**
 * A handler that does not finish in time (limits.handlerTimeoutMs): transient, so the event is retried on the
 * durable schedule and ends in the failure store when its budget is spent — a hung handler never holds its
 * aggregate, its batch or a worker forever. The consumer's connections also carry statement_timeout at the
 * same value (consumer/pool.ts), so a handler stuck inside a statement is cancelled and its rollback can run.
 */
export class HandlerTimeoutError extends PostboxError {
  constructor(ms: number) {
    super(
      'handler_timeout',
      'transient',
      `the handler did not finish within ${ms} ms (limits.handlerTimeoutMs); its transaction was rolled back`,
    );
  }
}

/** Runs `work`; rejects with HandlerTimeoutError after `ms`. A late settlement of `work` is ignored. */
export async function withinTimeout<T>(work: () => Promise<T>, ms: number): Promise<T> {
  const running = work();
  running.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      running,
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new HandlerTimeoutError(ms)), ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
