import type { Attributes, ObservableGauge } from '@opentelemetry/api';
import type { Queryable } from '../db/connect.ts';
import type { InboundRecord, PartitionLag } from '../ports/subscriber.ts';
import { consumerCounts } from '../queries/control-counts.ts';
import type { RecordResult } from '../records/wire.ts';
import { ATTR, OPERATION, POSTBOX_ATTR } from './attributes.ts';
import { DatabaseGauges, defineInstruments, guard, SYSTEM } from './instruments.ts';

/** The consumers: what they settled and how, how long it took, their retries, and what waits or lags. */
const instruments = defineInstruments((make) => ({
  consumed: make.count('messaging.client.consumed.messages', 'Records a consumer settled (any outcome)', '{message}'),
  processDuration: make.seconds(
    'messaging.process.duration',
    'Duration of one consume task (a batch transaction of up to maxBatchEvents events), dispatch to result',
  ),
  events: make.count(
    'postbox.consumer.events',
    'Consumer outcomes per event: applied, drained, duplicate, ignored, parked, failed, scheduled, transient',
    '{event}',
  ),
  endToEnd: make.seconds(
    'postbox.consumer.end_to_end.age',
    'From the event occurring to its consumer transaction committing',
  ),
  redelivered: make.count(
    'postbox.consumer.redelivered',
    'Records the broker delivered to this consumer again, at or below an offset it had already received',
    '{message}',
  ),
  retries: make.count(
    'postbox.consumer.retries',
    'Due retries run, by outcome (stale, settled, rescheduled, exhausted, expired)',
    '{retry}',
  ),
  parked: make.gauge('postbox.consumer.parked', 'Events parked waiting for an earlier version', '{event}'),
  failuresOpen: make.gauge('postbox.consumer.failures.open', 'Open rows in the failure store (DLQ size)', '{event}'),
  retriesWaiting: make.gauge('postbox.consumer.retries.waiting', 'Events scheduled for a durable retry', '{event}'),
  blocked: make.gauge(
    'postbox.consumer.blocked_aggregates',
    'Aggregates blocked by a retrying or failed event',
    '{aggregate}',
  ),
  lag: make.gauge(
    'postbox.consumer.lag',
    'Records on the broker not yet committed by the consumer group, per partition',
    '{message}',
  ),
}));

export interface ConsumerScope {
  consumer: string;
  groupId: string;
}

/**
 * One consume task's results, in the order of its records. `now` is when the result reached the main thread,
 * right after the worker's commit: the end of the end-to-end age.
 */
export function recordConsumeTask(
  scope: ConsumerScope,
  records: InboundRecord[],
  results: RecordResult[],
  durationMs: number,
  now = Date.now(),
): void {
  guard(() => consumeTask(scope, records, results, durationMs, now));
}

function consumeTask(
  scope: ConsumerScope,
  records: InboundRecord[],
  results: RecordResult[],
  durationMs: number,
  now: number,
): void {
  const m = instruments();
  if (m.off) return;
  const who = { [POSTBOX_ATTR.consumer]: scope.consumer };
  m.processDuration.record(durationMs / 1000, {
    ...SYSTEM,
    ...who,
    [ATTR.consumerGroup]: scope.groupId,
    [ATTR.operationName]: OPERATION.process,
  });
  for (let i = 0; i < records.length; i++) {
    const record = records[i]!;
    const r = results[i];
    if (!r) continue;
    const topic = { [ATTR.destinationName]: record.topic };
    m.consumed.add(1, { ...SYSTEM, ...who, ...topic, [ATTR.consumerGroup]: scope.groupId });
    m.events.add(1, {
      ...who,
      ...topic,
      [POSTBOX_ATTR.outcome]: r.outcome,
      ...(r.code && r.outcome !== 'applied' ? { [ATTR.errorType]: r.code } : {}),
    });
    if (r.drained > 0) m.events.add(r.drained, { ...who, ...topic, [POSTBOX_ATTR.outcome]: 'drained' });
    if (r.outcome === 'applied') {
      const occurred = Date.parse(record.headers.time ?? '');
      if (Number.isFinite(occurred)) m.endToEnd.record(Math.max(0, now - occurred) / 1000, { ...who, ...topic });
    }
  }
}

/**
 * Records of one partition delivered again (a re-fetch from the committed offset after a rebalance, a replaced
 * group member or a reassignment back to this process). Those another process received first are counted where
 * they land: the inbox's `duplicate` outcome.
 */
export function recordRedelivered(consumer: string, topic: string, count: number): void {
  guard(() => {
    if (count > 0)
      instruments().redelivered.add(count, { [POSTBOX_ATTR.consumer]: consumer, [ATTR.destinationName]: topic });
  });
}

export function recordRetryOutcome(consumer: string, outcome: string): void {
  guard(() => instruments().retries.add(1, { [POSTBOX_ATTR.consumer]: consumer, [POSTBOX_ATTR.outcome]: outcome }));
}

const consumerNames = new Map<object, string>();
const consumerGauges = new DatabaseGauges(
  instruments,
  (m) => [m.parked, m.failuresOpen, m.retriesWaiting, m.blocked],
  (sql) => consumerCounts(sql),
  (counts, result, m) => {
    for (const name of new Set(consumerNames.values())) {
      const c = counts.get(name);
      const who = { [POSTBOX_ATTR.consumer]: name };
      result.observe(m.parked, c?.parked ?? 0, who);
      result.observe(m.failuresOpen, c?.failures ?? 0, who);
      result.observe(m.retriesWaiting, c?.retries_waiting ?? 0, who);
      result.observe(m.blocked, c?.blocked ?? 0, who);
    }
  },
);

const lagSources = new Map<object, { consumer: string; lag: () => PartitionLag[] }>();
let lagGauge: { gauge: ObservableGauge; callback: (r: { observe(v: number, a?: Attributes): void }) => void } | null =
  null;

/**
 * A consumer's gauges while it runs: lag per partition (as last fetched from the broker) and, given a database
 * connection, its parked events, open failures, waiting retries and blocked aggregates.
 */
export function observeConsumer(
  owner: object,
  consumer: string,
  lag: () => PartitionLag[],
  sql: Queryable | null,
): () => void {
  const m = instruments();
  lagSources.set(owner, { consumer, lag });
  if (!lagGauge || lagGauge.gauge !== m.lag) {
    lagGauge?.gauge.removeCallback(lagGauge.callback);
    const callback = (result: { observe(v: number, a?: Attributes): void }) => {
      for (const source of lagSources.values()) {
        for (const p of source.lag()) {
          result.observe(p.lag, {
            [POSTBOX_ATTR.consumer]: source.consumer,
            [ATTR.destinationName]: p.topic,
            [ATTR.partitionId]: String(p.partition),
          });
        }
      }
    };
    m.lag.addCallback(callback);
    lagGauge = { gauge: m.lag, callback };
  }
  let removeDb: (() => void) | null = null;
  if (sql) {
    consumerNames.set(owner, consumer);
    removeDb = consumerGauges.add(owner, sql);
  }
  return () => {
    lagSources.delete(owner);
    if (lagSources.size === 0 && lagGauge) {
      lagGauge.gauge.removeCallback(lagGauge.callback);
      lagGauge = null;
    }
    consumerNames.delete(owner);
    removeDb?.();
  };
}
