// @postbox/engine/reconcile, for applications and operator tools: register the business source of truth, run the
// reconciliation checks, repair their findings through Postbox's own commands (docs/reconciliation.md).
export {
  defineReconcileSource,
  defineParticipantRecords,
  type ReconcileSource,
  type ReconcileSourceInput,
  type ParticipantRecords,
  type SourceVersion,
} from './reconcile/source.ts';
export { Reconciler, type ReconcilerConfig, type CheckInfo } from './reconcile/reconciler.ts';
export { DEFAULT_GRACE_MS, isCheckName, type ReconcileOptions } from './reconcile/options.ts';
export {
  CHECK_NAMES,
  type CheckName,
  type Finding,
  type FindingStatus,
  type StoredFinding,
} from './records/finding.ts';
export type { CheckRunCounts, CheckRunReport, RunBy } from './reconcile/run.ts';
export type {
  ItemOutcome,
  RepairCounts,
  RepairItem,
  RepairProgress,
  RepairReport,
  RepairRequest,
} from './reconcile/repair.ts';
export type { StopPolicy, StopReason } from './reconcile/stop-policy.ts';
export { outboxHas, outboxRowsAt, type OutboxFact } from './queries/reconcile-outbox.ts';
export { observeReconcileFindings } from './telemetry/metrics.ts';
export {
  countFindings,
  listFindings,
  type FindingFilter,
} from './queries/reconcile-finding.ts';
export {
  listRuns,
  readRun,
  type ReconcileRunRow,
  type RunFilter,
  type RunMode,
  type RunStatus,
  type RunTrigger,
} from './queries/reconcile-run.ts';
