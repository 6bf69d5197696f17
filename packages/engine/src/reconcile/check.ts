import type { Sql, Tx } from '../db/connect.ts';
import type { RetryScheduler } from '../ports/retry-scheduler.ts';
import type { SagaOrchestrator } from '../saga/orchestrator.ts';
import type { Finding, StoredFinding } from '../records/finding.ts';
import type { CheckName } from '../records/finding.ts';
import type { ResolvedReconcileOptions } from './options.ts';
import type { ParticipantRecords, ReconcileSource } from './source.ts';

/** What a check reads with: the database, what the application registered, and the clock. */
export interface CheckContext {
  sql: Sql;
  sources: readonly ReconcileSource[];
  participants: readonly ParticipantRecords[];
  /** The retry alarm clock of a consumer (retry-job-missing); null: that check cannot run here. */
  schedulerFor: ((consumer: string) => RetryScheduler) | null;
  /** Saga definitions (saga repairs build their commands from them); null: saga findings are for an operator. */
  sagas: SagaOrchestrator | null;
  options: ResolvedReconcileOptions;
  /** Epoch ms; every check compares ages against it (tests move it). */
  now(): number;
  /** Nudges the relays after a repair committed outbox rows (they also poll). */
  wake(): void;
}

/** One page of a scan: how many things were looked at, and what did not hold among them. */
export interface ScanPage {
  scanned: number;
  findings: Finding[];
}

/** What a repair has at hand beyond the check's context: whether it may act, and the audit log. */
export interface RepairContext extends CheckContext {
  dryRun: boolean;
  actor: string;
  reason: string;
  runId: number;
  /**
   * Writes the item's operator_audit row (before/after) in the repair's transaction; returns its id.
   * @defaultValue outcome 'ok'
   */
  audit(
    tx: Tx | Sql,
    action: string,
    finding: StoredFinding,
    before: unknown,
    after: unknown,
    outcome?: string,
  ): Promise<number>;
}

/**
 * What a repair did with one finding:
 * - repaired: the command ran (audited);
 * - would_repair: a dry run, the command it would run;
 * - stale: the condition no longer holds (re-checked before acting): nothing to do, the finding is resolved;
 * - manual: no command fits (or the command refused): an operator decides.
 * A repair that throws counts as failed; the finding stays open.
 */
export type RepairOutcome =
  | { outcome: 'repaired'; action: string; detail: string; auditId: number }
  | { outcome: 'would_repair'; action: string; detail: string }
  | { outcome: 'stale'; detail: string }
  | { outcome: 'manual'; detail: string };

/**
 * A named invariant. `scan` reads in bounded keyset pages and yields each page's findings (memory stays bounded
 * however many aggregates there are; no business row is locked); the judging is a pure function of the page's
 * facts, unit-tested on its own. `repair` acts on one stored finding through Postbox's existing idempotent
 * commands, after checking again that the condition still holds.
 */
export interface ReconcileCheck {
  readonly name: CheckName;
  /** One line: the invariant. */
  readonly description: string;
  /** Why the check cannot run with this context (say what to configure), or null. */
  unavailable(ctx: CheckContext): string | null;
  scan(ctx: CheckContext): AsyncIterable<ScanPage>;
  /**
   * Re-examines live findings the run did not observe (a page of them) and returns the ids of those whose key
   * holds now, judged settled: its subject has not moved since `settledBefore` (the run's start less the grace
   * period), so the scan looked at it and found nothing wrong — or it ended for good. A finding whose subject
   * moved since (the scan may have left it alone, inside its grace window), or that the check cannot judge, is
   * left out and stays as it is: a run closes only what it re-examined and found healthy.
   * @defaultValue none: the check's runs close nothing (its repairs still close what they find stale)
   */
  healthy?(ctx: CheckContext, findings: readonly StoredFinding[], settledBefore: Date): Promise<number[]>;
  repair(ctx: RepairContext, finding: StoredFinding): Promise<RepairOutcome>;
}
