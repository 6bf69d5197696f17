// @postbox/engine/control, for operator tools (GraphQL API, CLI): inspect and repair the pipeline.
export {
  BacklogMonitor,
  type BacklogReport,
  type ConsumerBacklog,
  type PartitionBacklog,
  type TopicBacklog,
} from './control/backlog.ts';
export { outboxBacklog } from './queries/outbox-backlog.ts';
export { outboxByTopic } from './queries/control-counts.ts';
export { eventStatus, type ConsumerEventStatus, type EventStatus } from './control/event-status.ts';
export type { OutboxEventRow } from './queries/event-status.ts';
export { skipEvent, type SkipResult } from './control/skip-event.ts';
export { retryNow, type RetryNowResult } from './control/retry-now.ts';
export { republish, type RepublishResult } from './control/republish.ts';
export { checkHealth, type HealthCheck, type Probe } from './control/health.ts';
export { BrokerHealthMonitor, type BrokerHealthMonitorOptions } from './control/broker-health.ts';
export type { BrokerHealthReport, BrokerNodeHealth, TopicReplicaHealth } from './ports/broker-health.ts';
export {
  listFailures,
  readFailure,
  type FailureDetail,
  type FailureFilter,
  type FailureSummary,
} from './queries/failure-list.ts';
export { openFailure, type FailureContent } from './crypto/row-seal.ts';
export { replayFailures, type ReplayItem } from './failures/replay.ts';
export { purgeFailurePayloads } from './queries/failure-purge.ts';
export { insertAudit, listAudit, type AuditRow } from './queries/audit.ts';
export { listBlocked, type BlockedAggregate } from './queries/consumer-blocked.ts';
export { reportGaps, backfillGaps } from './consumer/gaps.ts';
export { listConsumers } from './queries/consumer-registry.ts';
export {
  rotatePayloadKeys,
  type RotationOptions,
  type RotationProgress,
  type RotationResult,
} from './control/key-rotation.ts';
export { payloadKeyUsage } from './queries/payload-rotation.ts';
