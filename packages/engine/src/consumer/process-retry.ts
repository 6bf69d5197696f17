import type { Sql } from '../db/connect.ts';
import type { InboundRecord } from '../ports/subscriber.ts';
import { insertAudit } from '../queries/audit.ts';
import { blockAggregate } from '../queries/consumer-blocked.ts';
import { insertFailure } from '../queries/failure-insert.ts';
import { lockLedgerRow, scheduleRetry, settleLedgerRow, type LedgerRow } from '../queries/retry-ledger.ts';
import { settleRetriedFailure } from '../queries/retry-settle.ts';
import type { ConsumerDefinition } from './definition.ts';
import { parseRecord } from './parse.ts';
import type { RecordResult } from '../records/wire.ts';
import { nextRetry, type RetryBudget } from '../retry/budget.ts';
import { loadRecord, type StoredRecord } from '../records/stored-record.ts';
import type { PayloadKeyRing } from '../crypto/payload-keys.ts';
import { openRecord } from '../crypto/row-seal.ts';
import type { RetryJob, RetryScheduler } from '../ports/retry-scheduler.ts';
import { failpoint } from '../testing/failpoint.ts';
import { ATTR, POSTBOX_ATTR } from '../telemetry/attributes.ts';
import { creationLink, parseTraceparent } from '../telemetry/trace-context.ts';
import { activeTraceparent, inSpan, messageAttributes } from '../telemetry/tracing.ts';
import type { Link } from '@opentelemetry/api';

export interface RetryProcessorDeps {
  sql: Sql;
  consumer: string;
  scheduler: RetryScheduler;
  budget: RetryBudget;
  /** To store the parsed envelope with a failure. */
  definition: Pick<ConsumerDefinition, 'schemaVersions' | 'tenants' | 'limits'>;
  /**
   * Runs one record through the consumer's engine-owned transaction (inbox, version gate, handler);
   * `traceparent` is the retry span, the parent of the run's process span.
   */
  run: (record: InboundRecord, attempt: number, traceparent?: string) => Promise<RecordResult>;
  /** Opens sealed ledger rows and seals what this writes. @defaultValue null: rows in clear */
  payloadKeys?: PayloadKeyRing | null;
}

export type RetryProcessOutcome = 'stale' | 'settled' | 'rescheduled' | 'exhausted' | 'expired';

/**
 * A due retry: the job is only the alarm; the ledger row decides. A job that does not match the row's attempt
 * and due time (a duplicate delivery, or a row already settled) does nothing. Otherwise the stored record runs
 * the same engine-owned transaction as a first delivery; its outcome settles the row:
 * applied / duplicate / ignored / parked → done, the aggregate unblocked, its failure (a replay) marked replayed;
 * permanent → the consume step stored the failure; the row is exhausted;
 * transient → the budget decides: the next attempt, or exhausted (failure store), or expired (past the deadline).
 */
export async function processRetry(deps: RetryProcessorDeps, job: RetryJob): Promise<RetryProcessOutcome> {
  const row = await lockLedgerRow(deps.sql, deps.consumer, job.eventId);
  if (!row || row.status !== 'scheduled' || row.attempt !== job.attempt || row.next_attempt_at.getTime() !== job.dueAt)
    return 'stale';
  const stored = openRecord(deps.payloadKeys ?? null, row);
  // A new trace per attempt, linked to the event's creation and to whatever scheduled this attempt (the failed
  // delivery's process span, the previous attempt, or an operator's replay).
  const links: Link[] = [];
  const created = creationLink(stored.headers.traceparent, stored.headers.tracestate, { 'postbox.link': 'creation' });
  if (created) links.push(created);
  const scheduledBy = parseTraceparent(job.traceparent);
  if (scheduledBy) links.push({ context: scheduledBy, attributes: { 'postbox.link': 'scheduled_by' } });
  const attributes = {
    [ATTR.destinationName]: row.topic,
    ...messageAttributes({
      eventId: job.eventId,
      key: row.aggregate_id,
      partition: stored.partition,
      offset: stored.offset,
    }),
    [POSTBOX_ATTR.consumer]: deps.consumer,
    [POSTBOX_ATTR.attempt]: row.attempt,
    [POSTBOX_ATTR.aggregateVersion]: Number(row.aggregate_version),
  };
  return inSpan(`retry ${row.topic}`, { root: true, links, attributes }, async (span) => {
    const outcome = await runRetry(deps, job, row, stored, activeTraceparent(span));
    span.setAttribute(POSTBOX_ATTR.outcome, outcome);
    return outcome;
  });
}

async function runRetry(
  deps: RetryProcessorDeps,
  job: RetryJob,
  row: LedgerRow,
  stored: StoredRecord,
  traceparent: string | undefined,
): Promise<RetryProcessOutcome> {
  const record = loadRecord(stored);
  const result = await deps.run(record, row.attempt, traceparent);
  const replaces = record.headers.replaces ?? null;

  if (result.outcome === 'failed') {
    await settleLedgerRow(deps.sql, deps.consumer, job.eventId, 'exhausted');
    return 'exhausted';
  }
  if (result.outcome !== 'transient') {
    await deps.sql.begin(async (tx) => {
      await settleLedgerRow(tx, deps.consumer, job.eventId, 'done');
      await settleRetriedFailure(tx, deps.consumer, row.aggregate_id, [job.eventId, ...(replaces ? [replaces] : [])]);
    });
    // A parked successor that failed in the drain got its own ledger row; this is its alarm (reconciliation
    // would enqueue it too, later).
    for (const next of result.successorRetries ?? []) {
      await deps.scheduler.schedule({ consumer: deps.consumer, ...next }).catch(() => {});
    }
    return 'settled';
  }

  const decision = nextRetry({
    attempt: row.attempt,
    firstFailedAt: row.first_failed_at.getTime(),
    now: Date.now(),
    deadline: row.deadline?.getTime() ?? null,
    budget: deps.budget,
  });
  const code = result.code ?? 'error';
  const detail = result.detail ?? 'transient failure';
  if (decision.action === 'retry') {
    const dueAt = await deps.sql.begin((tx) =>
      scheduleRetry(
        tx,
        {
          consumer: deps.consumer,
          eventId: job.eventId,
          aggregateId: row.aggregate_id,
          aggregateVersion: Number(row.aggregate_version),
          topic: row.topic,
          record: stored,
          attempt: row.attempt + 1,
          delayMs: decision.delayMs,
          deadline: row.deadline,
          errorCode: code,
          error: detail,
        },
        deps.payloadKeys,
      ),
    );
    failpoint('retry.after-ledger-before-enqueue');
    await deps.scheduler.schedule({
      consumer: deps.consumer,
      eventId: job.eventId,
      attempt: row.attempt + 1,
      dueAt: dueAt.getTime(),
      ...(traceparent ? { traceparent } : {}),
    });
    return 'rescheduled';
  }
  const expired = decision.action === 'expired';
  const parsed = parseRecord(record, deps.definition);
  await deps.sql.begin(async (tx) => {
    await settleLedgerRow(tx, deps.consumer, job.eventId, expired ? 'expired' : 'exhausted');
    await insertFailure(
      tx,
      deps.consumer,
      {
        event_id: job.eventId,
        event_type: record.headers.type ?? null,
        aggregate_id: row.aggregate_id,
        aggregate_version: Number(row.aggregate_version),
        topic: record.topic,
        partition: record.partition,
        offset: record.offset,
        payload: record.value,
        headers: record.headers,
        envelope: parsed.ok ? parsed.envelope : undefined,
        error_code: expired ? 'expired' : code,
        error_detail: expired
          ? `deadline passed after ${row.attempt} attempt(s); last error: ${detail}`
          : `retry budget spent (${decision.action === 'exhausted' ? decision.reason : ''}) after ${row.attempt} attempt(s): ${detail}`,
        attempts: row.attempt,
        status: expired ? 'expired' : 'open',
        first_failed_at: row.first_failed_at,
      },
      deps.payloadKeys,
    );
    await blockAggregate(tx, deps.consumer, {
      aggregate_id: row.aggregate_id,
      event_id: job.eventId,
      aggregate_version: Number(row.aggregate_version),
      reason: 'failed',
      detail: expired ? `expired: ${detail}` : `${code}: ${detail}`,
    });
    if (expired)
      await insertAudit(tx, {
        actor: 'postbox',
        action: 'retry.expired',
        reason: 'deadline passed',
        target: `event:${job.eventId}`,
        before: { attempt: row.attempt },
        after: { status: 'expired' },
      });
  });
  return expired ? 'expired' : 'exhausted';
}
