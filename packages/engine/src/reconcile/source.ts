import type { Queryable, Tx } from '../db/connect.ts';
import { ConfigError } from '../errors.ts';

/** One aggregate of the business source of truth: its id and the version its own table is at. */
export interface SourceVersion {
  aggregate_id: string;
  /** Numbers, numeric strings and bigints are accepted (a `bigint` column reads as a string). */
  version: number | string | bigint;
}

export interface ReconcileSourceInput {
  /** The name of the aggregate type, part of every finding's key (`<aggregateType>:<id>@<version>`). */
  aggregateType: string;
  /** The topic its events go to (the outbox rows' `topic`). */
  topic: string;
  /**
   * Consumers that must apply every version (consumer-behind). @defaultValue the consumers registered
   * (consumer_registry) on `topic`
   */
  consumers?: readonly string[];
  /**
   * The application's own query: aggregates with the version their business row is at, ordered by id, the page
   * after `afterId` (null: the first page), at most `limit` rows. Read-only and without locks (it runs over every
   * aggregate, a page at a time); Postbox never guesses business state, it asks this.
   */
  versions: (sql: Queryable, afterId: string | null, limit: number) => Promise<ReadonlyArray<SourceVersion>>;
  /**
   * The idempotent command that (re-)emits the event of (aggregate, version) through the outbox in the
   * caller's transaction, when its outbox row is missing: it reads its business row (and may lock it, as any
   * command does), builds the event for the state it is in, and enqueues it. Returns true when it enqueued the
   * event, false when there was nothing to do (the row is no longer at that version, or the event exists).
   * Without it, a missing row is a finding for an operator.
   */
  reemit?: (tx: Tx, aggregateId: string, version: number) => Promise<boolean>;
}

export interface ReconcileSource extends Readonly<Omit<ReconcileSourceInput, 'consumers'>> {
  readonly consumers: readonly string[] | null;
  /** Marks a defineReconcileSource() result (module loaders check it). */
  readonly kind: 'postbox.reconcile-source';
}

const NAME = /^[A-Za-z0-9._-]{1,100}$/;

/**
 * Registers an aggregate type's source of truth for reconciliation (docs/reconciliation.md). Checked once, loudly:
 * the name and topic are what findings and repairs name.
 */
export function defineReconcileSource(input: ReconcileSourceInput): ReconcileSource {
  if (!NAME.test(input.aggregateType ?? ''))
    throw new ConfigError(
      `reconcile source: aggregateType must be 1–100 letters, digits, . _ -, got "${input.aggregateType}"`,
    );
  const where = `reconcile source ${input.aggregateType}`;
  if (!NAME.test(input.topic ?? ''))
    throw new ConfigError(`${where}: topic must be a topic name, got "${input.topic}"`);
  if (typeof input.versions !== 'function')
    throw new ConfigError(
      `${where}: versions(sql, afterId, limit) must be a function returning (aggregate_id, version)`,
    );
  if (input.reemit !== undefined && typeof input.reemit !== 'function')
    throw new ConfigError(`${where}: reemit must be a function (tx, aggregateId, version)`);
  if (input.consumers !== undefined && (!Array.isArray(input.consumers) || input.consumers.some((c) => !c)))
    throw new ConfigError(`${where}: consumers must be an array of consumer names`);
  return {
    aggregateType: input.aggregateType,
    topic: input.topic,
    consumers: input.consumers ? [...input.consumers] : null,
    versions: input.versions,
    ...(input.reemit ? { reemit: input.reemit } : {}),
    kind: 'postbox.reconcile-source',
  };
}

/**
 * Saga steps whose participants keep their step records (`saga_participation`) in this database, as the demo's
 * do: only for these can saga-step-mismatch ask "did the participant apply it?". Participants elsewhere keep
 * their records in their own databases, out of reach: a step of theirs has no record here, which would read as
 * "never applied", so the steps covered are always named, never assumed.
 */
export interface ParticipantRecords {
  sagaType: string;
  /** The steps whose participants record here (at least one). */
  steps: readonly string[];
  readonly kind: 'postbox.reconcile-participants';
}

export interface ParticipantRecordsInput {
  sagaType: string;
  /** The saga's steps whose participants keep their records in this database; required, at least one. */
  steps: readonly string[];
}

export function defineParticipantRecords(input: ParticipantRecordsInput): ParticipantRecords {
  if (!input?.sagaType) throw new ConfigError('participant records: sagaType is required');
  const steps: unknown = input.steps;
  if (!Array.isArray(steps) || steps.length === 0 || steps.some((s) => typeof s !== 'string' || s === ''))
    throw new ConfigError(
      `participant records of ${input.sagaType}: name the steps whose participants record in this database, ` +
        `e.g. defineParticipantRecords({ sagaType: '${input.sagaType}', steps: ['reserve', 'charge'] }); ` +
        'a step whose participant keeps its records elsewhere would read as never applied',
    );
  return { sagaType: input.sagaType, steps: [...(steps as string[])], kind: 'postbox.reconcile-participants' };
}

/** Whether a participant of this database records `step` of `sagaType` (any registration may name it). */
export function recordsStep(participants: readonly ParticipantRecords[], sagaType: string, step: string): boolean {
  return participants.some((p) => p.sagaType === sagaType && p.steps.includes(step));
}

/** A source's version as a safe integer, loud when the application's query returns something else. */
export function versionOf(source: ReconcileSource, row: SourceVersion): number {
  const v = Number(row.version);
  if (!Number.isSafeInteger(v) || v < 0)
    throw new ConfigError(
      `reconcile source ${source.aggregateType}: versions() returned version ${String(row.version)} for ${row.aggregate_id}; expected an integer ≥ 0`,
    );
  return v;
}
