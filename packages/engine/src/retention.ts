// @postbox/engine/retention: time partitioning of the outbox and the inbox (migration 0017, ADR 0009).
export { PartitionMaintenance, type PartitionMaintenanceDeps } from './retention/partition-maintenance.ts';
export { resolvePartitionOptions, type PartitionOptions } from './retention/partition-options.ts';
export { DEFAULT_RETENTION_DAYS, resolveRetentionPolicy, type RetentionPolicy } from './retention/policy.ts';
export { planRetention, type HeldPartition, type RetentionCandidate, type TablePlan } from './retention/plan.ts';
export { inboxWindowRefusal, type InboxWindowRefusal } from './retention/broker-retention.ts';
export { checkInboxWindow, RetentionRefusedError } from './retention/inbox-window.ts';
export {
  runRetention,
  type RetentionPartitionResult,
  type RetentionProgress,
  type RetentionReport,
  type RetentionRunOptions,
  type RetentionStep,
} from './retention/run.ts';
export { archivePath, verifyArchive, type ArchiveManifest } from './retention/archive.ts';
export { storageReport, type StorageTable } from './telemetry/storage-report.ts';
export {
  listPartitions,
  premakePartitions,
  PARTITIONED_TABLES,
  type PartitionedTable,
  type PartitionRow,
} from './queries/partitions.ts';
