import type { Tx } from '../db/connect.ts';
import type { Envelope } from '../envelope/envelope.ts';
import { ConfigError } from '../errors.ts';

export interface HandlerContext {
  consumer: string;
  partition: number;
  offset: string;
  /** 1 on first delivery, 2, 3, … on retries (in memory or from the durable schedule, or a replay). */
  attempt: number;
}

/**
 * A handler module's default export. It runs inside the engine's transaction: write the side effect with
 * `tx` and nothing else (no own transaction, no commit). Throw PermanentError when retrying cannot help;
 * any other error is transient and the event is tried again later.
 */
export type Handler = (event: Envelope, tx: Tx, context: HandlerContext) => Promise<void>;

/** Loads a handler module (once per worker thread) and checks its shape. */
export async function loadHandler(url: string): Promise<Handler> {
  let module: { default?: unknown };
  try {
    module = (await import(url)) as { default?: unknown };
  } catch (cause) {
    throw new ConfigError(`handler module ${url} could not be loaded: ${(cause as Error).message}`, { cause });
  }
  if (typeof module.default !== 'function') {
    throw new ConfigError(`handler module ${url} must have a default export: async (event, tx, context) => void`);
  }
  return module.default as Handler;
}
