import { ConfigError } from '../errors.ts';
import { CHECK_NAMES, type CheckName } from '../records/finding.ts';

/**
 * Each check's grace period (or SLA): how long a state may last before it counts as broken. A fresh outbox row
 * is pending, a fresh event is not yet applied, a saga's timer fires within a second — only what outlasts its
 * grace is a finding.
 */
export const DEFAULT_GRACE_MS: Readonly<Record<CheckName, number>> = {
  'outbox-missing': 60_000,
  'consumer-behind': 120_000,
  'retry-job-missing': 60_000,
  'saga-timer-unfired': 60_000,
  'saga-overdue': 3_600_000,
  'saga-step-mismatch': 60_000,
  'stale-failures': 86_400_000,
};

export interface ReconcileOptions {
  /** Rows read per page by every check (keyset pages: memory is bounded whatever the table size). @defaultValue 500 */
  pageSize?: number;
  /** Grace period (SLA) per check, ms. @defaultValue DEFAULT_GRACE_MS */
  graceMs?: Partial<Record<CheckName, number>>;
}

export interface ResolvedReconcileOptions {
  pageSize: number;
  graceMs: Readonly<Record<CheckName, number>>;
}

export function resolveReconcileOptions(o: ReconcileOptions = {}): ResolvedReconcileOptions {
  const pageSize = o.pageSize ?? 500;
  if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 10_000)
    throw new ConfigError(`reconcile pageSize must be an integer from 1 to 10000, got ${pageSize}`);
  const graceMs = { ...DEFAULT_GRACE_MS };
  for (const [name, ms] of Object.entries(o.graceMs ?? {})) {
    if (!isCheckName(name))
      throw new ConfigError(`reconcile graceMs: unknown check "${name}" (${CHECK_NAMES.join(', ')})`);
    if (!Number.isInteger(ms) || ms < 0)
      throw new ConfigError(`reconcile graceMs.${name} must be an integer ≥ 0, got ${ms}`);
    graceMs[name] = ms;
  }
  return { pageSize, graceMs };
}

export function isCheckName(name: string): name is CheckName {
  return (CHECK_NAMES as readonly string[]).includes(name);
}
