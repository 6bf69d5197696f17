// @postbox/engine/retention: time partitioning of the outbox and the inbox (migration 0017, ADR 0009).
export { PartitionMaintenance, type PartitionMaintenanceDeps } from './retention/partition-maintenance.ts';
export { resolvePartitionOptions, type PartitionOptions } from './retention/partition-options.ts';
export {
  listPartitions,
  premakePartitions,
  PARTITIONED_TABLES,
  type PartitionedTable,
  type PartitionRow,
} from './queries/partitions.ts';
