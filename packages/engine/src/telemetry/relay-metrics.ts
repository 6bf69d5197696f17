import { ValueType } from '@opentelemetry/api';
import type { Queryable } from '../db/connect.ts';
import { outboxByTopic } from '../queries/control-counts.ts';
import { ATTR, OPERATION, POSTBOX_ATTR } from './attributes.ts';
import { DatabaseGauges, defineInstruments, guard, SYSTEM } from './instruments.ts';

/** The outbox and its relay: what was sent, how long it took, what failed, and what still waits. */
const instruments = defineInstruments((make) => ({
  sent: make.count(
    'messaging.client.sent.messages',
    'Messages the relay handed to the broker (error.type set when not confirmed)',
    '{message}',
  ),
  sendDuration: make.seconds(
    'messaging.client.operation.duration',
    'Duration of one relay publish call (a batch) to the broker',
  ),
  publishLatency: make.seconds(
    'postbox.relay.publish.latency',
    'From the event occurring (outbox insert) to the broker confirming it',
  ),
  publishFailures: make.count(
    'postbox.relay.publish.failures',
    'Messages not confirmed by the broker, by error and by what the relay did (rescheduled, failed)',
    '{message}',
  ),
  traceContextDropped: make.count(
    'postbox.enqueue.trace_context.dropped',
    'Malformed traceparent/tracestate supplied at enqueue and ignored',
    '{event}',
  ),
  outboxPending: make.gauge(
    'postbox.outbox.pending',
    'Outbox rows not yet published, by status (pending, publishing)',
    '{message}',
  ),
  outboxOldest: make.gauge(
    'postbox.outbox.oldest_pending_age',
    'Age of the oldest unpublished outbox row',
    's',
    ValueType.DOUBLE,
  ),
  outboxFailed: make.gauge('postbox.outbox.failed', 'Outbox rows the relay gave up on (status failed)', '{message}'),
}));

/** Per topic, what one relay cycle's publish did (relay/cycle.ts reports it as CycleResult.sent). */
export interface TopicSendReport {
  topic: string;
  confirmed: number;
  /** Per confirmed message: from occurred_at to the confirmation, ms. */
  confirmAgesMs: number[];
  /** Unconfirmed messages by error code: returned to pending, ended `failed`, or (of those) never sent at all. */
  errors: Array<{ code: string; rescheduled: number; failed: number; refused: number }>;
}

/** What the metrics read of a relay cycle's result (relay/cycle.ts CycleResult). */
export interface RelayCycleReport {
  sent?: TopicSendReport[];
  /** Duration of the broker call, ms; null when nothing was sent. */
  publishMs?: number | null;
}

/** One relay cycle (inline or from a worker thread). */
export function recordRelayCycle(result: RelayCycleReport): void {
  guard(() => relayCycle(result));
}

function relayCycle(result: RelayCycleReport): void {
  if (!result.sent || result.sent.length === 0) return;
  const m = instruments();
  if (m.off) return;
  // A topic this relay sent to has an outbox gauge from now on, 0 when nothing is left: without this, a topic
  // whose rows were all published between two readings of the gauges would never get a series at all.
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

export function recordTraceContextDropped(topic: string): void {
  guard(() => instruments().traceContextDropped.add(1, { [ATTR.destinationName]: topic }));
}

// The query returns only topics with live or failed rows; a topic seen before (there, or in a relay cycle's send)
// reads 0 rather than keeping its last value (the SDK goes on reporting the last observation of a series that
// is no longer observed).
const outboxTopics = new Set<string>();
const outboxGauges = new DatabaseGauges(
  instruments,
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
