import {
  createNoopMeter,
  metrics,
  ValueType,
  type Attributes,
  type BatchObservableResult,
  type Meter,
  type MeterProvider,
  type Observable,
  type ObservableGauge,
} from '@opentelemetry/api';
import type { Queryable, Sql } from '../db/connect.ts';
import type { InboundRecord, PartitionLag } from '../ports/subscriber.ts';
import { consumerCounts, outboxByTopic } from '../queries/control-counts.ts';
import { liveFindingCounts } from '../queries/reconcile-metrics.ts';
import { lastFinishedRun } from '../queries/retention-ledger.ts';
import { SAGA_GAUGE_REFRESH_MS, sagaGaugeFacts } from '../queries/saga-metrics.ts';
import { storageReport } from '../retention/storage.ts';
import { CHECK_NAMES } from '../reconcile/options.ts';
import type { RecordResult } from '../consumer/wire.ts';
import type { CycleResult } from '../relay/cycle.ts';
import { ATTR, MESSAGING_SYSTEM, OPERATION, POSTBOX_ATTR } from './attributes.ts';

/**
 * Postbox's metrics, through @opentelemetry/api only (no MeterProvider registered: every instrument is a no-op
 * and no gauge query ever runs). They are recorded on the main thread, from what a relay cycle or a consume
 * task returns, because a piscina worker's meters would be a separate SDK that a single Prometheus endpoint
 * never sees. Attributes are bounded: topic, partition, consumer, outcome, error code — never an event id, key
 * or offset (docs/telemetry.md).
 *
 * The API has no proxy meter: a meter taken before the SDK is registered stays a no-op for ever. Instruments
 * are therefore made on first use per MeterProvider, so an SDK started after this module loaded is honoured.
 */
const SECONDS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900];
const SYSTEM = { [ATTR.systemName]: MESSAGING_SYSTEM };

function build(meter: Meter) {
  const seconds = (name: string, description: string) =>
    meter.createHistogram(name, { description, unit: 's', advice: { explicitBucketBoundaries: SECONDS } });
  const count = (name: string, description: string, unit: string) =>
    meter.createCounter(name, { description, unit, valueType: ValueType.INT });
  const gauge = (name: string, description: string, unit: string, valueType = ValueType.INT) =>
    meter.createObservableGauge(name, { description, unit, valueType });
  return {
    meter,
    sent: count(
      'messaging.client.sent.messages',
      'Messages the relay handed to the broker (error.type set when not confirmed)',
      '{message}',
    ),
    sendDuration: seconds(
      'messaging.client.operation.duration',
      'Duration of one relay publish call (a batch) to the broker',
    ),
    publishLatency: seconds(
      'postbox.relay.publish.latency',
      'From the event occurring (outbox insert) to the broker confirming it',
    ),
    publishFailures: count(
      'postbox.relay.publish.failures',
      'Messages not confirmed by the broker, by error and by what the relay did (rescheduled, failed)',
      '{message}',
    ),
    consumed: count('messaging.client.consumed.messages', 'Records a consumer settled (any outcome)', '{message}'),
    processDuration: seconds(
      'messaging.process.duration',
      'Duration of one consume task (a batch transaction of up to maxBatchEvents events), dispatch to result',
    ),
    events: count(
      'postbox.consumer.events',
      'Consumer outcomes per event: applied, drained, duplicate, ignored, parked, failed, scheduled, transient',
      '{event}',
    ),
    endToEnd: seconds(
      'postbox.consumer.end_to_end.age',
      'From the event occurring to its consumer transaction committing',
    ),
    retries: count(
      'postbox.consumer.retries',
      'Due retries run, by outcome (stale, settled, rescheduled, exhausted, expired)',
      '{retry}',
    ),
    traceContextDropped: count(
      'postbox.enqueue.trace_context.dropped',
      'Malformed traceparent/tracestate supplied at enqueue and ignored',
      '{event}',
    ),
    outboxPending: gauge(
      'postbox.outbox.pending',
      'Outbox rows not yet published, by status (pending, publishing)',
      '{message}',
    ),
    outboxOldest: gauge(
      'postbox.outbox.oldest_pending_age',
      'Age of the oldest unpublished outbox row',
      's',
      ValueType.DOUBLE,
    ),
    outboxFailed: gauge('postbox.outbox.failed', 'Outbox rows the relay gave up on (status failed)', '{message}'),
    parked: gauge('postbox.consumer.parked', 'Events parked waiting for an earlier version', '{event}'),
    failuresOpen: gauge('postbox.consumer.failures.open', 'Open rows in the failure store (DLQ size)', '{event}'),
    retriesWaiting: gauge('postbox.consumer.retries.waiting', 'Events scheduled for a durable retry', '{event}'),
    blocked: gauge(
      'postbox.consumer.blocked_aggregates',
      'Aggregates blocked by a retrying or failed event',
      '{aggregate}',
    ),
    sagas: gauge(
      'postbox.saga.instances',
      'Sagas by status (running, resolving, compensating, completed, compensated, needs_attention, closed_manually): started = the sum, ended by outcome = the ended statuses',
      '{saga}',
    ),
    sagaOldestRunning: gauge(
      'postbox.saga.oldest_running_age',
      'Age of the oldest saga still running, resolving or compensating',
      's',
      ValueType.DOUBLE,
    ),
    sagaTimeToEnd: gauge(
      'postbox.saga.time_to_end',
      'Start-to-end time of the sagas ended in the last five minutes, p50 and p99 (postbox.quantile), by how they ended',
      's',
      ValueType.DOUBLE,
    ),
    findingsOpen: gauge(
      'postbox.reconcile.findings.open',
      'Reconciliation findings still broken, per check: open (a repair can act) and manual (an operator decides)',
      '{finding}',
    ),
    storageBytes: gauge(
      'postbox.storage.bytes',
      'Bytes of a partitioned table (every partition: heap, indexes, TOAST)',
      'By',
    ),
    storageRows: gauge('postbox.storage.rows', "Rows of a partitioned table (the planner's estimate)", '{row}'),
    partitionsAhead: gauge(
      'postbox.storage.partitions_ahead',
      'Partitions made for periods still to come (below 2: no process is making them)',
      '{partition}',
    ),
    defaultRows: gauge(
      'postbox.storage.default_rows',
      'Rows in the default partition: ids outside every range (should stay 0)',
      '{row}',
    ),
    retentionAge: gauge(
      'postbox.retention.last_success_age',
      'Time since a retention run last finished (-1: never)',
      's',
      ValueType.DOUBLE,
    ),
    lag: gauge(
      'postbox.consumer.lag',
      'Records on the broker not yet committed by the consumer group, per partition',
      '{message}',
    ),
  };
}

type Instruments = ReturnType<typeof build> & { off: boolean };
let current: { provider: MeterProvider; instruments: Instruments } | null = null;
// With no MeterProvider the API hands out NoopMeters: recording skips even building attributes then.
const NoopMeter = createNoopMeter().constructor;

function instruments(): Instruments {
  const provider = metrics.getMeterProvider();
  if (current?.provider !== provider) {
    const meter = provider.getMeter('@postbox/engine', '0.1.0');
    current = { provider, instruments: { ...build(meter), off: meter instanceof NoopMeter } };
  }
  return current.instruments;
}

/** One relay cycle (inline or from a worker thread). */
export function recordRelayCycle(result: CycleResult): void {
  guard(() => relayCycle(result));
}

function relayCycle(result: CycleResult): void {
  if (!result.sent || result.sent.length === 0) return;
  const m = instruments();
  if (m.off) return;
  // A topic this relay sent to has an outbox gauge from now on, 0 when nothing is left: without this, a topic
  // whose rows were all published between two readings of the gauges never had a series at all.
  for (const t of result.sent) outboxTopics.add(t.topic);
  const single = result.sent.length === 1 ? result.sent[0]!.topic : null;
  if (result.publishMs !== undefined && result.publishMs !== null) {
    const sentError = result.sent.flatMap((t) => t.errors).find((e) => e.rescheduled + e.failed > e.refused)?.code;
    m.sendDuration.record(result.publishMs / 1000, {
      ...SYSTEM,
      [ATTR.operationName]: OPERATION.send,
      ...(single ? { [ATTR.destinationName]: single } : {}),
      ...(sentError ? { [ATTR.errorType]: sentError } : {}),
    });
  }
  for (const t of result.sent) {
    const topic = { ...SYSTEM, [ATTR.destinationName]: t.topic, [ATTR.operationName]: OPERATION.send };
    if (t.confirmed > 0) m.sent.add(t.confirmed, topic);
    for (const e of t.errors) {
      const failedSend = { ...topic, [ATTR.errorType]: e.code };
      // Refused rows were never handed to the broker: failures, but not sent messages.
      if (e.rescheduled + e.failed - e.refused > 0) m.sent.add(e.rescheduled + e.failed - e.refused, failedSend);
      if (e.rescheduled > 0)
        m.publishFailures.add(e.rescheduled, { ...failedSend, [POSTBOX_ATTR.outcome]: 'rescheduled' });
      if (e.failed > 0) m.publishFailures.add(e.failed, { ...failedSend, [POSTBOX_ATTR.outcome]: 'failed' });
    }
    for (const ms of t.confirmAgesMs)
      m.publishLatency.record(Math.max(0, ms) / 1000, { [ATTR.destinationName]: t.topic });
  }
}

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

export function recordRetryOutcome(consumer: string, outcome: string): void {
  guard(() => instruments().retries.add(1, { [POSTBOX_ATTR.consumer]: consumer, [POSTBOX_ATTR.outcome]: outcome }));
}

export function recordTraceContextDropped(topic: string): void {
  guard(() => instruments().traceContextDropped.add(1, { [ATTR.destinationName]: topic }));
}

/** Recording is called from the relay's and the consumer's loops: a metrics failure must never reach them. */
function guard(record: () => void): void {
  try {
    record();
  } catch {
    // A broken MeterProvider loses a data point, not an event.
  }
}

/**
 * Gauges read from PostgreSQL at collection time (a Prometheus scrape), at most once per `cacheMs` however
 * often it scrapes, and never when no MeterProvider is registered. A failing read skips one collection; it
 * never reaches the loop that registered it.
 */
class DatabaseGauges<T> {
  readonly #sources = new Map<object, Queryable>();
  readonly #observables: (m: Instruments) => Observable[];
  readonly #read: (sql: Queryable) => Promise<T>;
  readonly #observe: (value: T, result: BatchObservableResult, m: Instruments) => void;
  #registered: {
    meter: Meter;
    observables: Observable[];
    callback: (r: BatchObservableResult) => Promise<void>;
  } | null = null;
  #cache: { at: number; value: T } | null = null;
  readonly #cacheMs: number;

  constructor(
    observables: (m: Instruments) => Observable[],
    read: (sql: Queryable) => Promise<T>,
    observe: (value: T, result: BatchObservableResult, m: Instruments) => void,
    cacheMs = 5000,
  ) {
    this.#cacheMs = cacheMs;
    this.#observables = observables;
    this.#read = read;
    this.#observe = observe;
  }

  /** Registers a source; returns its idempotent removal. Several sources in one process observe once. */
  add(owner: object, sql: Queryable): () => void {
    this.#sources.set(owner, sql);
    const m = instruments();
    if (!this.#registered || this.#registered.meter !== m.meter) {
      this.#unregister();
      const observables = this.#observables(m);
      const callback = async (result: BatchObservableResult) => {
        const value = await this.#value();
        if (value !== null) this.#observe(value, result, m);
      };
      m.meter.addBatchObservableCallback(callback, observables);
      this.#registered = { meter: m.meter, observables, callback };
    }
    return () => {
      this.#sources.delete(owner);
      if (this.#sources.size === 0) this.#unregister();
    };
  }

  async #value(): Promise<T | null> {
    if (this.#cache && Date.now() - this.#cache.at < this.#cacheMs) return this.#cache.value;
    const sql = this.#sources.values().next().value;
    if (!sql) return null;
    try {
      this.#cache = { at: Date.now(), value: await this.#read(sql) };
      return this.#cache.value;
    } catch {
      return this.#cache?.value ?? null;
    }
  }

  #unregister(): void {
    if (!this.#registered) return;
    this.#registered.meter.removeBatchObservableCallback(this.#registered.callback, this.#registered.observables);
    this.#registered = null;
    this.#cache = null;
  }
}

// The query returns only topics with live or failed rows; a topic seen before (there, or in a relay cycle's send)
// reads 0 rather than keeping its last value (the SDK goes on reporting the last observation of a series that
// is no longer observed).
const outboxTopics = new Set<string>();
const outboxGauges = new DatabaseGauges(
  (m) => [m.outboxPending, m.outboxOldest, m.outboxFailed],
  (sql) => outboxByTopic(sql),
  (found, result, m) => {
    const byTopic = new Map(found.map((r) => [r.topic, r]));
    for (const r of found) outboxTopics.add(r.topic);
    for (const name of outboxTopics) {
      const r = byTopic.get(name) ?? { topic: name, pending: 0, publishing: 0, failed: 0, oldest_pending_ms: null };
      const topic = { [ATTR.destinationName]: r.topic };
      result.observe(m.outboxPending, r.pending, { ...topic, [POSTBOX_ATTR.status]: 'pending' });
      result.observe(m.outboxPending, r.publishing, { ...topic, [POSTBOX_ATTR.status]: 'publishing' });
      result.observe(m.outboxOldest, r.oldest_pending_ms === null ? 0 : r.oldest_pending_ms / 1000, topic);
      result.observe(m.outboxFailed, r.failed, topic);
    }
  },
);

/** The outbox gauges (pending, oldest pending age, failed), while a relay runs in this process. */
export function observeOutbox(owner: object, sql: Queryable): () => void {
  return outboxGauges.add(owner, sql);
}

const consumerNames = new Map<object, string>();
const consumerGauges = new DatabaseGauges(
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

const SAGA_STATUSES = [
  'running',
  'resolving',
  'compensating',
  'completed',
  'compensated',
  'needs_attention',
  'closed_manually',
] as const;
const sagaGauges = new DatabaseGauges(
  (m) => [m.sagas, m.sagaOldestRunning, m.sagaTimeToEnd],
  (sql) => sagaGaugeFacts(sql),
  (facts, result, m) => {
    const counts = new Map(facts.byStatus.map((r) => [r.status, r.count]));
    for (const status of SAGA_STATUSES) {
      result.observe(m.sagas, counts.get(status) ?? 0, { [POSTBOX_ATTR.sagaStatus]: status });
    }
    result.observe(m.sagaOldestRunning, facts.oldestRunningS ?? 0);
    for (const e of facts.timeToEnd) {
      result.observe(m.sagaTimeToEnd, e.p50, { [POSTBOX_ATTR.sagaStatus]: e.status, [POSTBOX_ATTR.quantile]: 'p50' });
      result.observe(m.sagaTimeToEnd, e.p99, { [POSTBOX_ATTR.sagaStatus]: e.status, [POSTBOX_ATTR.quantile]: 'p99' });
    }
  },
  // Counting the sagas by status reads the whole table: at most once a minute per process, not at every scrape.
  SAGA_GAUGE_REFRESH_MS,
);

/**
 * The saga gauges (instances by status, the oldest running, recent time to end), while a saga timer runner runs
 * in this process: read from the rows, since sagas move in consumer worker threads whose meters no endpoint sees.
 */
export function observeSagas(owner: object, sql: Queryable): () => void {
  return sagaGauges.add(owner, sql);
}

const reconcileGauges = new DatabaseGauges(
  (m) => [m.findingsOpen],
  (sql) => liveFindingCounts(sql),
  (rows, result, m) => {
    const counts = new Map(rows.map((r) => [`${r.check}/${r.status}`, r.count]));
    // Every check and status, 0 when none: a series that drops to nothing must read 0, not its last value.
    for (const check of CHECK_NAMES) {
      for (const status of ['open', 'manual'] as const) {
        result.observe(m.findingsOpen, counts.get(`${check}/${status}`) ?? 0, {
          [POSTBOX_ATTR.reconcileCheck]: check,
          [POSTBOX_ATTR.findingStatus]: status,
        });
      }
    }
  },
);

/**
 * The reconciliation gauge (live findings per check and status), while something that runs reconciliation lives
 * in this process (the control plane): read from the rows, whoever ran the checks (the CLI, another process).
 */
export function observeReconcileFindings(owner: object, sql: Queryable): () => void {
  return reconcileGauges.add(owner, sql);
}

const storageGauges = new DatabaseGauges(
  (m) => [m.storageBytes, m.storageRows, m.partitionsAhead, m.defaultRows, m.retentionAge],
  async (sql) => ({ tables: await storageReport(sql as Sql), lastRun: await lastFinishedRun(sql) }),
  ({ tables, lastRun }, result, m) => {
    for (const t of tables) {
      const table = { [POSTBOX_ATTR.table]: t.table };
      result.observe(m.storageBytes, t.bytes, table);
      result.observe(m.storageRows, t.rows, table);
      result.observe(m.partitionsAhead, t.partitionsAhead, table);
      result.observe(m.defaultRows, t.defaultRows, table);
    }
    result.observe(m.retentionAge, lastRun === null ? -1 : (Date.now() - lastRun.getTime()) / 1000);
  },
);

/**
 * The storage gauges (size, partitions ahead, rows in the default partition, time since retention last ran),
 * while partition maintenance runs in this process (every relay, consumer and `postbox start`).
 */
export function observeStorage(owner: object, sql: Sql): () => void {
  return storageGauges.add(owner, sql);
}
