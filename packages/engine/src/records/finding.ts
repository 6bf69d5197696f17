/**
 * A finding: one broken invariant of one business key, as a check observed it. Checks produce findings from facts
 * (pure functions, one file per check under checks/); the run upserts them by (check, key), so a re-run updates
 * rather than duplicates, and a full run that no longer observes one closes it.
 */
export type FindingStatus = 'open' | 'repaired' | 'resolved' | 'ignored' | 'manual';

export interface Finding {
  /**
   * Stable within its check: the same broken fact gets the same key on every run, e.g. `demo-order:order-7@3`
   * (business id and version), `<consumer>/<aggregate>` or a saga id.
   */
  key: string;
  /** The case of the check it is, e.g. `missing_row` or `unpublished` for outbox-missing. */
  kind: string;
  /** What should hold (JSON). */
  expected: Record<string, unknown>;
  /** What was seen (JSON). */
  observed: Record<string, unknown>;
  /** The check's repair can act on it; false: only an operator can (stored as `manual`). */
  repairable: boolean;
}

/** A finding as stored (reconciliation_finding). */
export interface StoredFinding {
  id: number;
  check: string;
  key: string;
  kind: string;
  expected: Record<string, unknown>;
  observed: Record<string, unknown>;
  status: FindingStatus;
  /** The last repair taken or refused: `{ action, detail, actor, runId, auditId?, error?, at }`. */
  repair: Record<string, unknown> | null;
  firstRunId: number;
  lastRunId: number;
  firstSeenAt: Date;
  lastSeenAt: Date;
  closedAt: Date | null;
}

/** The checks Postbox runs, one file each under reconcile/checks/. */
export const CHECK_NAMES = [
  'outbox-missing',
  'consumer-behind',
  'retry-job-missing',
  'saga-timer-unfired',
  'saga-overdue',
  'saga-step-mismatch',
  'stale-failures',
] as const;

export type CheckName = (typeof CHECK_NAMES)[number];
