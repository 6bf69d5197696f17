import type { Tx } from '../db/connect.ts';
import type { Envelope } from '../envelope/envelope.ts';
import type { PostboxError } from '../errors.ts';
import type { InboundRecord } from '../ports/subscriber.ts';
import { blockAggregate } from '../queries/consumer-blocked.ts';
import { insertFailure } from '../queries/failure-insert.ts';
import { scheduleRetry as insertLedgerRow } from '../queries/retry-ledger.ts';
import { nextRetry } from '../retry/budget.ts';
import { classify } from '../retry/classify.ts';
import { scrubPayload } from '../telemetry/redact.ts';
import type { StepDeps, ValidEvent } from './step-deps.ts';
import { storeRecord } from '../records/stored-record.ts';
import type { RecordResult } from '../records/wire.ts';

/**
 * How the consume step settles what did not apply: a permanent failure goes to the failure store and blocks its
 * aggregate; a transient one with durable retries becomes a retry ledger row plus the block; a reused event id is
 * kept as a conflict. Every write here happens in a transaction the caller names, so a settle is all or nothing.
 */

/** What the failure store keeps of one event that failed for good. */
export interface Failure {
  code: string;
  detail: string;
  envelope?: Envelope | undefined;
  eventId: string | null;
  eventType: string | null;
  aggregateId: string | null;
  aggregateVersion: number | null;
  /** @defaultValue 1 */
  attempts?: number;
  /** @defaultValue 'open' */
  status?: 'open' | 'expired';
}

/** A retry written to the ledger; the scheduler job is enqueued after the commit. */
export interface ScheduledRetry {
  eventId: string;
  attempt: number;
  dueAt: number;
  traceparent?: string;
}

export function failureOf(envelope: Envelope, cause: unknown, code: string): Failure {
  return {
    code,
    detail: errorDetail(cause, envelope),
    envelope,
    eventId: envelope.event_id,
    eventType: envelope.event_type,
    aggregateId: envelope.aggregate_id,
    aggregateVersion: envelope.aggregate_version,
  };
}

/** A permanent failure, in its own transaction: failure row with the raw bytes, and the aggregate blocked. */
export async function settleFailure(deps: StepDeps, record: InboundRecord, failure: Failure): Promise<RecordResult> {
  try {
    await deps.sql.begin((tx) => failInTransaction(tx, deps, record, failure));
    return { outcome: 'failed', drained: 0, code: failure.code, detail: failure.detail };
  } catch (cause) {
    return transient(cause, classify(cause).code, failure.envelope);
  }
}

export async function failInTransaction(tx: Tx, deps: StepDeps, record: InboundRecord, f: Failure): Promise<void> {
  const consumer = deps.definition.name;
  await insertFailure(
    tx,
    consumer,
    {
      event_id: f.eventId,
      event_type: f.eventType,
      aggregate_id: f.aggregateId,
      aggregate_version: f.aggregateVersion,
      topic: record.topic,
      partition: record.partition,
      offset: record.offset,
      payload: record.value ? Buffer.from(record.value) : null,
      headers: record.headers,
      envelope: f.envelope,
      error_code: f.code,
      error_detail: f.detail,
      attempts: f.attempts ?? 1,
      status: f.status ?? 'open',
    },
    deps.payloadKeys,
  );
  if (f.aggregateId) {
    await blockAggregate(tx, consumer, {
      aggregate_id: f.aggregateId,
      event_id: f.eventId,
      aggregate_version: f.aggregateVersion,
      reason: 'failed',
      detail: `${f.code}: ${f.detail}`,
    });
  }
}

/**
 * A transient failure of attempt `attempt`, settled durably in `tx`: the retry budget decides between a ledger
 * row for attempt + 1 (plus the aggregate's block, so later versions park behind it) and the failure store (the
 * budget is spent, or the event's deadline passed). The offset may move on once `tx` commits either way.
 */
export async function scheduleRetry(
  tx: Tx,
  deps: StepDeps,
  record: InboundRecord,
  envelope: Envelope,
  failed: { cause: unknown; code: string; attempt: number },
): Promise<{ retry: ScheduledRetry } | { failure: Failure }> {
  const { cause, code, attempt } = failed;
  const consumer = deps.definition.name;
  const detail = errorDetail(cause, envelope);
  const now = Date.now();
  const deadline = envelope.deadline ? Date.parse(envelope.deadline) : null;
  const decision = nextRetry({ attempt, firstFailedAt: now, now, deadline, budget: deps.definition.retry });
  if (decision.action !== 'retry') {
    const expired = decision.action === 'expired';
    const failure: Failure = {
      ...failureOf(envelope, cause, expired ? 'expired' : code),
      detail: expired
        ? `deadline ${envelope.deadline} passed; last error: ${detail}`
        : `retry budget spent (${decision.reason}) after ${attempt} attempt(s): ${detail}`,
      attempts: attempt,
      status: expired ? 'expired' : 'open',
    };
    await failInTransaction(tx, deps, record, failure);
    return { failure };
  }
  const dueAt = await insertLedgerRow(
    tx,
    {
      consumer,
      eventId: envelope.event_id,
      aggregateId: envelope.aggregate_id,
      aggregateVersion: envelope.aggregate_version,
      topic: record.topic,
      record: storeRecord(record),
      attempt: attempt + 1,
      delayMs: decision.delayMs,
      deadline: deadline === null ? null : new Date(deadline),
      errorCode: code,
      error: detail,
    },
    deps.payloadKeys,
  );
  await blockAggregate(tx, consumer, {
    aggregate_id: envelope.aggregate_id,
    event_id: envelope.event_id,
    aggregate_version: envelope.aggregate_version,
    reason: 'retrying',
    detail: `${code}: ${detail}`,
  });
  const traceparent = deps.spans.traceparentOf(envelope.event_id);
  return {
    retry: {
      eventId: envelope.event_id,
      attempt: attempt + 1,
      dueAt: dueAt.getTime(),
      ...(traceparent ? { traceparent } : {}),
    },
  };
}

/**
 * The same event_id with other content than the event taken in before: a producer reused an id. Never absorbed
 * as a duplicate: stored in the failure store (raw bytes kept) and not applied; the aggregate is not blocked
 * (the event of that id was applied, or is still coming, with its own content).
 */
export async function conflictFailure(tx: Tx, deps: StepDeps, event: ValidEvent): Promise<RecordResult> {
  const detail = `event_id ${event.envelope.event_id} was taken in before with other content (type, versions, key or data differ): a producer reused the id; this delivery was not applied`;
  await insertFailure(
    tx,
    deps.definition.name,
    {
      event_id: event.envelope.event_id,
      event_type: event.envelope.event_type,
      aggregate_id: event.envelope.aggregate_id,
      aggregate_version: event.envelope.aggregate_version,
      topic: event.record.topic,
      partition: event.record.partition,
      offset: event.record.offset,
      payload: event.record.value ? Buffer.from(event.record.value) : null,
      headers: event.record.headers,
      envelope: event.envelope,
      error_code: 'event_id_conflict',
      error_detail: detail,
    },
    deps.payloadKeys,
  );
  return { outcome: 'failed', drained: 0, code: 'event_id_conflict', detail };
}

/**
 * An error's text as stored and logged: a handler's (or its statement's) error may quote the event's data, so
 * the data's values are taken out of it (telemetry/redact.ts) before it leaves the worker.
 */
export function errorDetail(cause: unknown, envelope?: Envelope): string {
  const error = cause as PostboxError | undefined;
  return scrubPayload(String(error?.message ?? cause), envelope?.data).slice(0, 2000);
}

/** The consumer keeps the event in memory and tries it again after its backoff. */
export function transient(cause: unknown, code: string, envelope?: Envelope): RecordResult {
  return { outcome: 'transient', drained: 0, code, detail: errorDetail(cause, envelope) };
}
