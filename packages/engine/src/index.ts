// Public surface of @postbox/engine. Everything not named here is internal.
export { connect, type ConnectOptions, type Sql, type Tx, type Queryable } from './db/connect.ts';
export { migrate, readMigrations, defaultMigrationsDirectory, type MigrateOptions } from './migrate/runner.ts';
export {
  PostboxError,
  EnvelopeValidationError,
  EnvelopeTooLargeError,
  IdempotencyConflictError,
  BusinessConflictError,
  PermanentError,
  ConfigError,
  BrokerError,
  NotFoundError,
  ActionRefusedError,
  type ErrorKind,
  type EnvelopeIssue,
} from './errors.ts';
export { validateEnvelope, encodeData, DEFAULT_MAX_ENVELOPE_BYTES, type Envelope } from './envelope/envelope.ts';
export { newEventId } from './envelope/event-id.ts';
export { enqueue, enqueueMany, type EventInput, type EnqueueOptions } from './outbox/enqueue.ts';
export { transaction } from './outbox/transaction.ts';
export { createWaker, WAKE_CHANNEL, type Waker } from './outbox/wake.ts';
export { idempotent, requestHash, type IdempotentCommand, type IdempotentResult } from './outbox/idempotency.ts';
export { expectRows } from './outbox/expect-rows.ts';
export { backoffDelayMs, backoffCeilingMs, defaultBackoff, type BackoffOptions } from './retry/backoff.ts';
export type { Publisher, OutboundMessage, Confirmation, PublishOutcome } from './ports/publisher.ts';
export { KafkaPublisher, type KafkaPublisherOptions } from './adapters/kafka/publisher.ts';
export { ensureTopics, type TopicSpec } from './adapters/kafka/topics.ts';
export { createKafka, parseBrokers, type KafkaConnection } from './adapters/kafka/client.ts';
export { classifyKafkaError } from './adapters/kafka/classify.ts';
export { Relay, type RelayConfig, type RelayStats } from './relay/relay.ts';
export { runLaneCycle, type LaneTask, type CycleResult, type CycleDeps } from './relay/cycle.ts';
export { inlineExecutor, type LaneExecutor } from './relay/executor.ts';
export { resolveRelayOptions, defaultRelayOptions, type RelayOptions } from './relay/options.ts';
export { toRecord } from './relay/record.ts';
export { FailureStreak } from './telemetry/failure-streak.ts';
export { createLogger, silentLogger, REDACTED_PATHS, type Logger, type LoggerOptions } from './telemetry/logger.ts';
export { outboxBacklog, type OutboxBacklog } from './queries/outbox-backlog.ts';
export type { Subscriber, SubscriberSink, InboundRecord, TopicPartition, PartitionLag } from './ports/subscriber.ts';
export { KafkaSubscriber, type KafkaSubscriberOptions, type SubscriberCrash } from './adapters/kafka/subscriber.ts';
export { defineConsumer, defaultConsumerLimits, type ConsumerInput, type ConsumerDefinition, type ConsumerLimits, type RetryInput } from './consumer/definition.ts';
export { gate, expectedVersion, type FirstVersionPolicy, type GateDecision } from './consumer/version-gate.ts';
export { Watermark } from './consumer/watermark.ts';
export { Consumer, type ConsumerConfig, type ConsumerStats } from './consumer/consumer.ts';
export { consumeBatch, type ConsumeStepDeps } from './consumer/consume-step.ts';
export { inlineConsumeExecutor, type ConsumeExecutor } from './consumer/executor.ts';
export { loadHandler, type Handler, type HandlerContext } from './consumer/handler.ts';
export { encodeTask, type ConsumeTask, type ConsumeTaskResult, type RecordResult, type Outcome } from './consumer/wire.ts';
export { inMemoryRetry, type TransientPolicy } from './consumer/transient-policy.ts';
export { reportGaps, backfillGaps, type VersionGap, type GapReportOptions, type BackfillResult } from './consumer/gaps.ts';
export { classify, classifySqlState, commitOutcomeUnknown, IMMEDIATE_RETRIES, type Classification } from './retry/classify.ts';
export { nextRetry, defaultRetryBudget, type RetryBudget, type RetryDecision } from './retry/budget.ts';
export { RetryScheduler, retryJobId, type RetryJob, type RetrySchedulerOptions } from './retry/scheduler.ts';
export { reconcileLedger, type ReconcileReport } from './retry/reconcile.ts';
export { scheduleRetry, lockLedgerRow, settleLedgerRow, type LedgerRow, type ScheduleRetry } from './queries/retry-ledger.ts';
export { listFailures, readFailure, aggregateState, type FailureFilter, type FailureSummary, type FailureDetail } from './queries/failure-list.ts';
export { replayFailures, type ReplayRequest, type ReplayItem, type ReplayVerdict } from './failures/replay.ts';
export { processRetry, type RetryProcessorDeps, type RetryProcessOutcome } from './retry/process-retry.ts';
export { insertAudit, listAudit, type AuditEntry, type AuditFilter, type AuditRow } from './queries/audit.ts';
export { blockAggregate, listBlocked, type BlockedAggregate, type BlockReason } from './queries/consumer-blocked.ts';
export { purgeFailurePayloads } from './queries/failure-purge.ts';
// The control plane's operations (GraphQL resolvers call only these).
export type { BrokerOffsets, PartitionPosition } from './ports/offsets.ts';
export { KafkaOffsets } from './adapters/kafka/offsets.ts';
export { registerConsumer, listConsumers, type RegisteredConsumer } from './queries/consumer-registry.ts';
export { BacklogMonitor, type BacklogReport, type ConsumerBacklog, type TopicBacklog, type PartitionBacklog, type BacklogMonitorOptions } from './control/backlog.ts';
export { RateWindow, drainSeconds } from './control/rate-window.ts';
export { eventStatus, consumerState, type EventStatus, type ConsumerEventStatus, type ConsumerEventState } from './control/event-status.ts';
export type { OutboxEventRow } from './queries/event-status.ts';
export { skipEvent, type SkipRequest, type SkipResult } from './control/skip-event.ts';
export { retryNow, type RetryNowRequest, type RetryNowResult } from './control/retry-now.ts';
export { republish, type RepublishRequest, type RepublishResult } from './control/republish.ts';
export { checkHealth, type HealthCheck, type Probe } from './control/health.ts';
// Telemetry: OpenTelemetry through @opentelemetry/api only (the SDK is started by entry files, see @postbox/api).
export { otelRequest, type OtelRequest } from './telemetry/otel-env.ts';
export { ATTR, LEGACY_ATTR, POSTBOX_ATTR } from './telemetry/attributes.ts';
export { parseTraceparent, formatTraceparent, sanitizeTraceFields, type TraceContextFields } from './telemetry/trace-context.ts';
export { recordLogFields, type EventLogFields } from './telemetry/log-fields.ts';
export type { TopicSendReport, FailedEvent } from './relay/cycle.ts';
// The verifier (postbox verify; the end of every fault scenario) and the failpoints fault tests arm.
export { verify } from './verify/verify.ts';
export { collect, type VerifyConsumer, type CollectDeps } from './verify/collect.ts';
export { check } from './verify/check.ts';
export { defaultCheckOptions, type CheckOptions } from './verify/options.ts';
export { formatReport, totals, type VerifyTotals, type VerifyReport, type LogReport, type ConsumerReport, type EventState } from './verify/report.ts';
export type { Violation, Invariant, LogInvariant, ConsumerInvariant, Tally } from './verify/violations.ts';
export type { EffectSource } from './verify/effect-source.ts';
export type { Observation, OutboxFact, RecordFact, PartitionFact, ConsumerFacts, FailureFact, EffectFacts } from './verify/observation.ts';
export type { TopicReader, LogBounds } from './ports/topic-reader.ts';
export { KafkaTopicReader, type KafkaTopicReaderOptions } from './adapters/kafka/topic-reader.ts';
export { fingerprint } from './envelope/fingerprint.ts';
export { FAILPOINTS, parseFailpoint, type FailpointName } from './testing/failpoint.ts';
export { consumerSql } from './consumer/pool.ts';
export { HandlerTimeoutError } from './consumer/handler-timeout.ts';
