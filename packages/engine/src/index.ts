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
export { createLogger, silentLogger, type Logger } from './telemetry/logger.ts';
export { outboxBacklog, type OutboxBacklog } from './queries/outbox-backlog.ts';
