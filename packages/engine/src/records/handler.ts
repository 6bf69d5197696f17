import type { Tx } from '../db/connect.ts';
import type { Envelope } from '../envelope/envelope.ts';

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

/** One event of a batch handed to a batch handler, with its context. */
export interface BatchItem {
  event: Envelope;
  context: HandlerContext;
}

/**
 * A handler module's optional `handleBatch` export: the events a task applies together — distinct aggregates,
 * each already past the inbox and the version gate — in one call, so their effect can be written set-based
 * (one statement for all rather than one per event). Same rules as a Handler: write with `tx` only; a throw
 * rolls the whole batch back, and each event is then applied alone (through the same function, a batch of one)
 * so the failure is pinned on the event that caused it.
 */
export type BatchHandler = (batch: readonly BatchItem[], tx: Tx) => Promise<void>;

/**
 * A handler that carries its own batch form, used when its module exports no `handleBatch`: a library handler
 * whose batches need an order of their own (sagaReplyHandler locks a task's sagas in id order) keeps it however the
 * module is written.
 */
export type HandlerWithBatch = Handler & { readonly batch?: BatchHandler };

/** A loaded handler module: the per-event handler, and the batch handler when the module has one. */
export interface HandlerModule {
  handler: Handler;
  batch: BatchHandler | null;
}
