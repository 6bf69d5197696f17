import type { Sql } from '../db/connect.ts';
import { ActionRefusedError, ConfigError, NotFoundError } from '../errors.ts';
import { insertAudit } from '../queries/audit.ts';
import { scheduleRetry } from '../queries/retry-ledger.ts';
import type { PayloadKeyRing } from '../crypto/payload-keys.ts';
import { lockSkipTarget, markSkipped, takeParkedSuccessor } from '../queries/skip-event.ts';
import type { RetryScheduler } from '../ports/retry-scheduler.ts';
import { requireRegisteredConsumer } from './registered-consumer.ts';

export interface SkipRequest {
  consumer: string;
  eventId: string;
  actor: string;
  reason: string;
}

export interface SkipResult {
  consumer: string;
  eventId: string;
  aggregateId: string;
  skippedVersion: number;
  /** The parked successor now scheduled to run (it drains the rest), or null when nothing was parked. */
  resumedEventId: string | null;
  auditId: number;
}

/**
 * The explicit unblock (docs/operations.md): an aggregate whose head failed for good moves past it without its side
 * effect, and what was parked behind it drains through the retry path. Only the head can be skipped — skipping a
 * later version would hide the earlier one — and only by an audited operator action with a reason. A consumer
 * that never registered is refused first (NotFoundError); the scheduler (null without Redis) is asked for only
 * when a parked successor must be woken.
 */
export async function skipEvent(
  sql: Sql,
  schedulerFor: (consumer: string) => RetryScheduler | null,
  request: SkipRequest,
  keys: PayloadKeyRing | null = null,
): Promise<SkipResult> {
  if (!request.reason.trim()) throw new ConfigError('skip needs a reason (it is written to the audit log)');
  await requireRegisteredConsumer(sql, request.consumer);
  const outcome = await sql.begin(async (tx) => {
    const target = await lockSkipTarget(tx, request.consumer, request.eventId);
    if (!target)
      throw new NotFoundError(
        `no open failure or scheduled retry of event ${request.eventId} for consumer ${request.consumer}`,
      );
    if (target.last_version !== null && target.aggregate_version > target.last_version + 1) {
      throw new ActionRefusedError(
        'not_at_head',
        `event ${request.eventId} is version ${target.aggregate_version} of ${target.aggregate_id}, but the consumer is at version ${target.last_version}: resolve version ${target.last_version + 1} first`,
      );
    }
    await markSkipped(tx, request.consumer, request.eventId, target);
    const next = await takeParkedSuccessor(tx, request.consumer, target.aggregate_id, target.aggregate_version);
    let dueAt: Date | null = null;
    if (next) {
      if (!schedulerFor(request.consumer))
        throw new ConfigError('skipping an event with parked successors needs the retry scheduler (REDIS_URL)');
      dueAt = await scheduleRetry(
        tx,
        {
          consumer: request.consumer,
          eventId: next.event_id,
          aggregateId: target.aggregate_id,
          aggregateVersion: target.aggregate_version + 1,
          topic: next.topic,
          record: next.record,
          attempt: 1,
          delayMs: 0,
          deadline: null,
          errorCode: 'skip',
          error: `resumed after ${request.actor} skipped ${request.eventId}`,
          resetBudget: true,
        },
        keys,
      );
    }
    const auditId = await insertAudit(tx, {
      actor: request.actor,
      action: 'event.skip',
      reason: request.reason,
      target: `consumer:${request.consumer}/event:${request.eventId}`,
      before: {
        aggregate_id: target.aggregate_id,
        aggregate_version: target.aggregate_version,
        last_version: target.last_version,
        failure_id: target.failure_id,
        retry_scheduled: target.retry_scheduled,
      },
      after: {
        last_version: Math.max(target.last_version ?? 0, target.aggregate_version),
        resumed_event_id: next?.event_id ?? null,
      },
    });
    return { target, next, dueAt, auditId };
  });
  // After commit: the job is only the alarm clock; if this enqueue fails, reconciliation re-enqueues from the ledger.
  const scheduler = outcome.next && outcome.dueAt ? schedulerFor(request.consumer) : null;
  if (outcome.next && outcome.dueAt && scheduler) {
    await scheduler.schedule({
      consumer: request.consumer,
      eventId: outcome.next.event_id,
      attempt: 1,
      dueAt: outcome.dueAt.getTime(),
    });
  }
  return {
    consumer: request.consumer,
    eventId: request.eventId,
    aggregateId: outcome.target.aggregate_id,
    skippedVersion: outcome.target.aggregate_version,
    resumedEventId: outcome.next?.event_id ?? null,
    auditId: outcome.auditId,
  };
}
