/**
 * Every metric Postbox records, by domain; importing this module defines them all, so they are made together
 * on first use per MeterProvider (instruments.ts). The names and attributes are documented in docs/telemetry.md.
 */
export { recordRelayCycle, recordTraceContextDropped, observeOutbox } from './relay-metrics.ts';
export type { RelayCycleReport, TopicSendReport } from './relay-metrics.ts';
export {
  recordConsumeTask,
  recordRedelivered,
  recordRetryOutcome,
  observeConsumer,
  type ConsumerScope,
} from './consumer-metrics.ts';
export { observeSagas } from './saga-metrics.ts';
export { observeReconcileFindings } from './reconcile-metrics.ts';
export { observeStorage } from './storage-metrics.ts';
export { observeBrokerHealth } from './broker-metrics.ts';
