/**
 * What the verifier looked at: the facts collect.ts reads from the log (Kafka) and from PostgreSQL, as plain
 * data, so that the checks (check.ts, invariants/) are pure functions of it and can be tested without any service.
 *
 * Collection order makes the facts safe to compare although they are not one atomic snapshot: the log's end
 * offsets and records first, then each group's committed offsets, then PostgreSQL in one repeatable-read
 * transaction. A consumer commits an offset only after the database commit that settled the records below it,
 * and the relay marks a row published only after the broker acknowledged it, so everything the earlier reads
 * show as done is already visible to the later ones.
 */
export interface Observation {
  /** When collection started (epoch ms): ages are measured from here. */
  at: number;
  /** Outbox rows on the observed topics. */
  outbox: OutboxFact[];
  /** Per partition of the observed topics: the log's start and end when it was read. */
  partitions: PartitionFact[];
  /** Every record read, in offset order per partition. */
  records: RecordFact[];
  consumers: ConsumerFacts[];
  /** The sagas (instances, history, commands sent); absent: sagas not checked. */
  sagas?: SagaFacts;
}

/** What the saga invariants (invariants/sagas.ts) look at: rows of saga_instance, saga_history and the outbox. */
export interface SagaFacts {
  instances: Array<{
    sagaId: string;
    type: string;
    status:
      | 'running'
      | 'resolving'
      | 'compensating'
      | 'completed'
      | 'compensated'
      | 'needs_attention'
      | 'closed_manually';
    version: number;
    steps: string[];
    /** Commands sent to each step, by the saga's own count. */
    sends: number[];
    /** When the command out counts as unanswered (epoch ms): the saga's live timer. */
    dueAt: number | null;
    attentionReason: string | null;
  }>;
  /** Every transition, in the order written. */
  history: Array<{ sagaId: string; version: number; to: string; at: number }>;
  /** Every command the orchestrator wrote to the outbox, in the order written; createdAt is its transaction's time. */
  commands: Array<{ sagaId: string; step: string; direction: string; attempt: number; createdAt: number }>;
}

export type OutboxStatus = 'pending' | 'publishing' | 'published' | 'failed';

export interface OutboxFact {
  eventId: string;
  aggregateId: string;
  version: number;
  topic: string;
  status: OutboxStatus;
  attempts: number;
  /** The broker position the relay stored with the confirmation (published rows). */
  partition: number | null;
  offset: string | null;
  /** epoch ms */
  availableAt: number;
  /** epoch ms; set while publishing */
  leaseUntil: number | null;
}

export interface PartitionFact {
  topic: string;
  partition: number;
  /** First offset still in the log. */
  low: string;
  /** Next offset to be written, when the log was read: records below it were read. */
  high: string;
}

export interface RecordFact {
  topic: string;
  partition: number;
  offset: string;
  key: string | null;
  /** The record's `id` attribute when it is a UUID (lowercased), else null. */
  eventId: string | null;
  /** Its `aggregateversion` attribute when it is a positive integer, else null. */
  version: number | null;
  /** envelope/fingerprint.ts, hex: equal for re-sends of one event, different for another payload. */
  fingerprint: string;
}

export interface ConsumerFacts {
  name: string;
  groupId: string;
  topics: string[];
  /** The group's committed offsets (next to read); partitions without one are absent. */
  committed: Array<{ topic: string; partition: number; offset: string }>;
  inbox: Array<{ eventId: string; aggregateId: string; version: number | null; duplicates: number }>;
  versions: Array<{ aggregateId: string; lastVersion: number }>;
  failures: FailureFact[];
  retries: Array<{ eventId: string; status: 'scheduled' | 'done' | 'exhausted' | 'expired'; nextAttemptAt: number }>;
  parked: Array<{ eventId: string; aggregateId: string; version: number; parkedAt: number }>;
  blocked: Array<{ aggregateId: string; eventId: string | null; reason: 'retrying' | 'failed' }>;
  /** The side effects the consumer's handler recorded, when a source was given (effect-source.ts); null: not checked. */
  effects: EffectFacts | null;
}

export interface FailureFact {
  eventId: string | null;
  aggregateId: string | null;
  version: number | null;
  topic: string | null;
  partition: number | null;
  offset: string | null;
  code: string;
  status: 'open' | 'replayed' | 'skipped' | 'expired';
}

/**
 * - log: one row per side effect, in the order they happened (a table the handler appends to in the engine's
 *   transaction): the verifier sees each event's effect count and the order per aggregate.
 * - counts: one row per aggregate of a projection that counts what it applied (applied_count) next to the
 *   version it holds; versions are assumed to start at 1, so count = version when each applied once.
 */
export type EffectFacts =
  | { kind: 'log'; rows: Array<{ eventId: string; aggregateId: string; version: number }> }
  | { kind: 'counts'; rows: Array<{ aggregateId: string; version: number; count: number }> };

/** The key of a partition in the checks' maps. */
export const partitionKey = (topic: string, partition: number): string => `${topic}/${partition}`;

/** The key of a record's position; also how samples name a position, e.g. `orders/2/1841`. */
export const positionKey = (topic: string, partition: number, offset: string): string =>
  `${topic}/${partition}/${offset}`;
