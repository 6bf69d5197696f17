/**
 * One error tree for Postbox. Every error has a stable `code` (for operators, logs and the failure store),
 * a `kind` that decides the retry policy, and keeps its `cause`.
 *
 * - transient: retrying the same thing later can succeed (connection reset, broker unavailable, 40001/40P01).
 * - permanent: retrying cannot succeed without a change (validation, unknown schema, message too large).
 * - unknown:   the peer may or may not have acted (timeout after send, commit reply lost): retry with the same
 *              id, or query the final state, never invent a new identity.
 */
export type ErrorKind = 'transient' | 'permanent' | 'unknown';

export class PostboxError extends Error {
  readonly code: string;
  readonly kind: ErrorKind;

  constructor(code: string, kind: ErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.kind = kind;
  }
}

/** One violated rule of the envelope contract. `path` is the field, `rule` what it must satisfy. */
export interface EnvelopeIssue {
  path: string;
  rule: string;
}

/** The event does not satisfy the envelope contract; nothing was written. */
export class EnvelopeValidationError extends PostboxError {
  readonly issues: EnvelopeIssue[];

  constructor(issues: EnvelopeIssue[], options?: { cause?: unknown }) {
    const summary = issues.map((i) => `${i.path || '(envelope)'}: ${i.rule}`).join('; ');
    super('envelope_invalid', 'permanent', `invalid event envelope: ${summary}`, options);
    this.issues = issues;
  }
}

/** The serialized event is larger than the configured limit. */
export class EnvelopeTooLargeError extends PostboxError {
  readonly bytes: number;
  readonly limit: number;

  constructor(bytes: number, limit: number) {
    super('envelope_too_large', 'permanent', `event is ${bytes} bytes, over the limit of ${limit} bytes`);
    this.bytes = bytes;
    this.limit = limit;
  }
}

/** The same (scope, key) was used before with a different request. */
export class IdempotencyConflictError extends PostboxError {
  readonly scope: string;
  readonly key: string;

  constructor(scope: string, key: string) {
    super(
      'idempotency_conflict',
      'permanent',
      `idempotency key "${key}" in scope "${scope}" was already used with a different request`,
    );
    this.scope = scope;
    this.key = key;
  }
}

/**
 * A conditional business update matched no row: the state changed under the caller (a concurrent update won,
 * or the precondition does not hold). The transaction must roll back.
 */
export class BusinessConflictError extends PostboxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('business_conflict', 'permanent', message, options);
  }
}

/** Thrown by a handler to say that retrying this event cannot succeed. */
export class PermanentError extends PostboxError {
  constructor(message: string, options?: { cause?: unknown; code?: string }) {
    super(options?.code ?? 'handler_permanent', 'permanent', message, options);
  }
}

/** A configuration value is wrong; the message says which and how to fix it. */
export class ConfigError extends PostboxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('config_invalid', 'permanent', message, options);
  }
}

/**
 * A write meant for the caller's transaction was given a handle that is not inside one (a pool, a database object,
 * a client before BEGIN): it would commit on its own, apart from the business change. Nothing was written.
 */
export class NotInTransactionError extends PostboxError {
  readonly client: string;

  constructor(client: string, hint: string, options?: { cause?: unknown }) {
    super(
      'not_in_transaction',
      'permanent',
      `${client}: not inside a transaction: ${hint}; nothing was written`,
      options,
    );
    this.client = client;
  }
}

/** A broker operation failed; `kind` says whether a retry can help. */
export class BrokerError extends PostboxError {
  /** A transient error still there after this many attempts is a misconfiguration: give up then. */
  readonly permanentAfter: number | undefined;

  constructor(code: string, kind: ErrorKind, message: string, options?: { cause?: unknown; permanentAfter?: number }) {
    super(code, kind, message, options);
    this.permanentAfter = options?.permanentAfter;
  }
}

/** What an operator action names does not exist (an event, a failure, a scheduled retry). */
export class NotFoundError extends PostboxError {
  constructor(what: string) {
    super('not_found', 'permanent', `${what} not found`);
  }
}

/**
 * An operator action that cannot be done in the current state, with the reason and what to do instead. Nothing
 * was changed (the refusal itself is audited by the caller).
 */
export class ActionRefusedError extends PostboxError {
  constructor(code: string, message: string) {
    super(code, 'permanent', message);
  }
}

/**
 * A sealed row (failure store, retry ledger) that cannot be opened with the keys at hand: its key is not in the
 * ring, or its bytes do not authenticate. Permanent: retrying without the right key cannot succeed.
 */
export class PayloadKeyError extends PostboxError {
  constructor(code: 'payload_key_missing' | 'payload_sealed_invalid', message: string, options?: { cause?: unknown }) {
    super(code, 'permanent', message, options);
  }
}
