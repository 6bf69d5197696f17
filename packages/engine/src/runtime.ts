// @postbox/engine/runtime, for the workers and CLI roles that run relays, consumers and the retry scheduler.
export { Relay } from './relay/relay.ts';
export { runLaneCycle, type CycleResult, type LaneTask } from './relay/cycle.ts';
export { inlineExecutor, type LaneExecutor } from './relay/executor.ts';
export { resolveRelayOptions, type RelayOptions, type RelayOptionsInput } from './relay/options.ts';
export type { OutboundMessage, PublishOutcome, Publisher } from './ports/publisher.ts';
export { Consumer, type ConsumerStats } from './consumer/consumer.ts';
export { consumeBatch, type ConsumeStepDeps } from './consumer/consume-step.ts';
export { inlineConsumeExecutor, type ConsumeExecutor } from './consumer/executor.ts';
export { encodeTask, type ConsumeTask, type ConsumeTaskResult } from './records/wire.ts';
export { loadHandler, loadHandlerModule } from './consumer/handler-module.ts';
export { consumerSql } from './consumer/pool.ts';
export { registerConsumer } from './queries/consumer-registry.ts';
export { PartitionLeases, type PartitionLeaseOptions } from './consumer/partition-leases.ts';
export type { PartitionAssignment } from './ports/partition-assignment.ts';
export type {
  InboundRecord,
  PartitionLag,
  Subscriber,
  SubscriberSink,
  TopicPartition,
} from './ports/subscriber.ts';
export { classify } from './retry/classify.ts';
export { backoffCeilingMs, backoffDelayMs, defaultBackoff } from './retry/backoff.ts';
export type { RetryScheduler, RetryJob } from './ports/retry-scheduler.ts';
export { reconcileLedger } from './retry/reconcile.ts';
export { FailureStreak } from './telemetry/failure-streak.ts';
export { otelRequest } from './telemetry/otel-env.ts';
