/**
 * What the verifier says when an invariant does not hold: one Violation per invariant and scope (the log, or one
 * consumer), typed so that code (tests, the fault suite's settle loop) decides on `invariant` and `final` and
 * people read `message`. The names are the catalogue of what `postbox verify` checks; the checks live one
 * concern per file under invariants/ (log.ts, consumer.ts, effects.ts).
 */

/** Invariants of the log, outbox ↔ topic (invariants/log.ts). */
export type LogInvariant =
  | 'lost-write'
  | 'position-conflict'
  | 'failed-write-read'
  | 'log-reorder'
  | 'expired-lease'
  | 'overdue-pending'
  | 'unpublished';

/** Invariants of each consumer: its events (invariants/consumer.ts) and side effects (invariants/effects.ts). */
export type ConsumerInvariant =
  | 'lost'
  | 'unreported-conflict'
  | 'overdue-retry'
  | 'parked-gap'
  | 'in-flight'
  | 'retry-pending'
  | 'applied-twice'
  | 'out-of-order';

/** Invariants of the sagas (invariants/sagas.ts); their violations name no consumer. */
export type SagaInvariant =
  | 'saga-stuck'
  | 'saga-unsettled'
  | 'saga-history'
  | 'saga-command-twice'
  | 'saga-compensation-order'
  | 'saga-command-after-attention';

export type Invariant = LogInvariant | ConsumerInvariant | SagaInvariant;

/** A count and the first few ids (or descriptions) behind it. */
export interface Tally {
  count: number;
  sample: string[];
}

export interface Violation extends Tally {
  invariant: Invariant;
  /** The consumer whose events break it; null for the log's invariants. */
  consumer: string | null;
  /**
   * Only a final check reports it: work not settled yet (in flight, unpublished, a retry not run), which mid-run
   * is normal and becomes a violation once everything is expected to have settled.
   */
  final: boolean;
  /** One line for people (CLI, logs). Code decides on the other fields, never on this text. */
  message: string;
}

const SAMPLE = 10;
const SHOWN = 3;

export function tally(): Tally {
  return { count: 0, sample: [] };
}

export function add(t: Tally, id: string): void {
  t.count++;
  if (t.sample.length < SAMPLE) t.sample.push(id);
}

const scope = (consumer: string | null, invariant?: Invariant) =>
  consumer !== null ? `consumer ${consumer}` : invariant?.startsWith('saga-') ? 'sagas' : 'log';

/** The violation of a tally that counted something (none when it counted nothing, or null: not checked). */
export function breached(invariant: Invariant, consumer: string | null, t: Tally | null, what: string): Violation[] {
  if (!t || t.count === 0) return [];
  const shown = `${t.sample.slice(0, SHOWN).join('; ')}${t.count > SHOWN ? '; …' : ''}`;
  return [
    {
      invariant,
      consumer,
      count: t.count,
      sample: t.sample,
      final: false,
      message: `${scope(consumer, invariant)}: ${what}: ${t.count} (${shown})`,
    },
  ];
}

/** Work not settled yet: a violation of a final check only. `what` follows the count: "3 events still in flight". */
export function unsettled(
  invariant: Invariant,
  consumer: string | null,
  t: Tally,
  what: string,
  finalCheck: boolean,
): Violation[] {
  if (!finalCheck || t.count === 0) return [];
  return [
    {
      invariant,
      consumer,
      count: t.count,
      sample: t.sample,
      final: true,
      message: `${scope(consumer, invariant)}: ${t.count} ${what} (final check)`,
    },
  ];
}

/** What an invariant file returns: its part of the report, and the violations found in it. */
export interface Checked<R> {
  report: R;
  violations: Violation[];
}
