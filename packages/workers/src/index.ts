export { createPublishPool, type PublishPoolOptions } from './pools.ts';
export {
  createBrokerOffsets,
  createPublisher,
  createSubscriber,
  createTopicReader,
  ensureBrokerTopics,
  partitionCounts,
  type BrokerConnection,
  type SubscriberSettings,
} from './broker.ts';
export type { PublishWorkerData } from './publish-worker-data.ts';
export { createConsumePool, type ConsumePoolOptions } from './consume-pool.ts';
export type { ConsumeWorkerData } from './consume-worker-data.ts';
export {
  ThreadTelemetry,
  startThreadTelemetry,
  defaultServiceName,
  SEND_LINK_LIMIT,
  type ThreadTelemetryOptions,
} from './thread-telemetry.ts';
export {
  startRelay,
  awaitTopics,
  DEFAULT_RELAY_THREADS,
  type RelayRuntimeOptions,
  type RunningRelay,
} from './runtime/relay.ts';
export { startConsumer, type ConsumerRuntimeOptions } from './runtime/consumer.ts';
export { startWhenReady } from './runtime/start-when-ready.ts';
