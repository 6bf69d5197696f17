import { PostboxError } from '@postbox/engine';

/**
 * The roles one command runs (relay, consumer, demo, control plane …), started as one unit: they start in
 * order (or side by side, `startedTogether`), and if one fails — or a stop signal arrives while they start — the ones already started stop again,
 * last started first (which is also the graceful stop order), so a failed start never leaves half a process
 * running against closed pools. Signals are handled in the command; this only reads the signal.
 */
export class RoleSet {
  readonly #signal: AbortSignal;
  readonly #started: Array<{ name: string; stop: () => Promise<void> }> = [];

  constructor(signal: AbortSignal) {
    this.#signal = signal;
  }

  /**
   * Starts one role and remembers how to stop it. Throws `StartInterrupted` when the stop signal came first,
   * and `RoleStartError` (naming the role, with `hint` saying what to do when it can) when the start failed.
   */
  async start<T>(
    name: string,
    start: () => Promise<T>,
    stop: (role: T) => Promise<void>,
    hint?: (cause: unknown) => string | undefined,
  ): Promise<T> {
    if (this.#signal.aborted) throw new StartInterrupted(name);
    let role: T;
    try {
      role = await start();
    } catch (cause) {
      if (cause instanceof StartInterrupted) throw cause;
      throw new RoleStartError(name, cause, hint?.(cause));
    }
    this.#started.push({ name, stop: () => stop(role) });
    if (this.#signal.aborted) throw new StartInterrupted(name);
    return role;
  }

  /** Stops every started role, last started first; a role that fails to stop does not keep the others running. */
  async stop(onError: (name: string, cause: unknown) => void = () => {}): Promise<void> {
    for (let role = this.#started.pop(); role; role = this.#started.pop()) {
      try {
        await role.stop();
      } catch (cause) {
        onError(role.name, cause);
      }
    }
  }
}

/**
 * Roles started side by side (each through RoleSet.start): waits until every one has started or failed — so each
 * one that started is recorded, and stops with the others — then throws the first failure, or returns them all.
 */
export async function startedTogether<const T extends readonly unknown[]>(
  starts: readonly [...{ [K in keyof T]: Promise<T[K]> }],
): Promise<T> {
  const settled = await Promise.allSettled(starts);
  const failed = settled.find((s) => s.status === 'rejected');
  if (failed) throw (failed as PromiseRejectedResult).reason;
  return settled.map((s) => (s as PromiseFulfilledResult<unknown>).value) as unknown as T;
}

/** A stop signal arrived while the roles were starting. */
export class StartInterrupted extends Error {
  constructor(before: string) {
    super(`stop signal received while starting (before ${before} was up)`);
    this.name = 'StartInterrupted';
  }
}

/** One role failed to start; the message is the one line an operator reads. */
export class RoleStartError extends PostboxError {
  readonly role: string;

  constructor(role: string, cause: unknown, hint?: string) {
    super(
      'start_failed',
      'permanent',
      hint ?? `${role} failed to start: ${(cause as Error)?.message ?? String(cause)}`,
      { cause },
    );
    this.name = 'RoleStartError';
    this.role = role;
  }
}

/** The hint for a listening role whose port is taken. */
export function portHint(port: number, variable: string): (cause: unknown) => string | undefined {
  return (cause) =>
    (cause as NodeJS.ErrnoException)?.code === 'EADDRINUSE'
      ? `port ${port} is in use: set ${variable} or stop the other process`
      : undefined;
}
