/**
 * Every attribute name Postbox puts on spans and metrics, in one place. The messaging names follow the
 * OpenTelemetry semantic conventions pinned in package.json (@opentelemetry/semantic-conventions 1.45.0, whose
 * messaging conventions are still "development"); attributes.test.ts checks them against that package. They are
 * literals here because loading the package's incubating entry costs ~30 ms in every worker thread.
 *
 * 1.45 renamed three Kafka names (messaging.system → messaging.system.name, messaging.kafka.offset →
 * kafka.offset, messaging.kafka.message.key → kafka.message.key). Spans carry both spellings until backends
 * catch up (the conventions' own `messaging/dup` transition); metrics carry only the current ones, since a
 * duplicated label doubles no information but every series' size.
 */
export const ATTR = {
  systemName: 'messaging.system.name',
  operationType: 'messaging.operation.type',
  operationName: 'messaging.operation.name',
  destinationName: 'messaging.destination.name',
  partitionId: 'messaging.destination.partition.id',
  messageId: 'messaging.message.id',
  consumerGroup: 'messaging.consumer.group.name',
  batchCount: 'messaging.batch.message_count',
  bodySize: 'messaging.message.body.size',
  kafkaKey: 'kafka.message.key',
  kafkaOffset: 'kafka.offset',
  errorType: 'error.type',
} as const;

/** The pre-1.45 spellings, emitted on spans next to the current ones (see above). */
export const LEGACY_ATTR = {
  system: 'messaging.system',
  kafkaKey: 'messaging.kafka.message.key',
  kafkaOffset: 'messaging.kafka.offset',
} as const;

/** Postbox's own attributes: the envelope's identity and the engine's decisions. */
export const POSTBOX_ATTR = {
  eventType: 'postbox.event.type',
  aggregateVersion: 'postbox.aggregate.version',
  consumer: 'postbox.consumer.name',
  /** applied | duplicate | ignored | parked | drained | failed | transient | scheduled (consumer); published | rescheduled | failed (relay); stale | settled | rescheduled | exhausted | expired (retry). */
  outcome: 'postbox.outcome',
  attempt: 'postbox.attempt',
  lane: 'postbox.relay.lane',
  failureId: 'postbox.failure.id',
  dryRun: 'postbox.replay.dry_run',
  actor: 'postbox.actor',
  /** Outbox row state for the outbox gauges. */
  status: 'postbox.outbox.status',
  /** A saga's id, step and direction, on the create spans of its commands and replies. */
  sagaId: 'postbox.saga.id',
  sagaStep: 'postbox.saga.step',
  sagaDirection: 'postbox.saga.direction',
  /** A saga's status (saga gauges) and how it ended (time to end). */
  sagaStatus: 'postbox.saga.status',
  quantile: 'postbox.quantile',
  /** A reconciliation check's name and a finding's status (open, manual), on the findings gauge. */
  reconcileCheck: 'postbox.reconcile.check',
  findingStatus: 'postbox.reconcile.finding.status',
  /** A partitioned table (message_outbox, message_inbox), on the storage gauges. */
  table: 'postbox.table',
} as const;

export const MESSAGING_SYSTEM = 'kafka';

/** Operation types of the conventions (messaging.operation.type). */
export const OPERATION = {
  create: 'create',
  send: 'send',
  process: 'process',
  settle: 'settle',
} as const;
