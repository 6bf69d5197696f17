import type { Sql } from '../db/connect.ts';
import { NotFoundError } from '../errors.ts';
import { insertAudit } from '../queries/audit.ts';
import type { RetryScheduler } from '../ports/retry-scheduler.ts';

export interface RetryNowRequest {
  consumer: string;
  eventId: string;
  actor: string;
  reason: string | null;
}

export interface RetryNowResult {
  consumer: string;
  eventId: string;
  attempt: number;
  dueAt: Date;
  auditId: number;
}

/**
 * Brings a scheduled retry forward to now: the ledger row's due time moves (the attempt count does not), and a
 * job for the new due time is enqueued. The old job finds a due time that no longer matches and does nothing.
 */
export async function retryNow(sql: Sql, scheduler: RetryScheduler, request: RetryNowRequest): Promise<RetryNowResult> {
  const row = await sql.begin(async (tx) => {
    const [r] = await tx<{ attempt: number; next_attempt_at: Date; before: Date }[]>`
      UPDATE message_retry SET next_attempt_at = now(), updated_at = now()
      WHERE consumer_name = ${request.consumer} AND event_id = ${request.eventId} AND status = 'scheduled'
      RETURNING attempt, next_attempt_at, (SELECT next_attempt_at FROM message_retry
                                           WHERE consumer_name = ${request.consumer} AND event_id = ${request.eventId}) AS before`;
    if (!r) throw new NotFoundError(`no scheduled retry of event ${request.eventId} for consumer ${request.consumer}`);
    const auditId = await insertAudit(tx, {
      actor: request.actor,
      action: 'retry.now',
      reason: request.reason,
      target: `consumer:${request.consumer}/event:${request.eventId}`,
      before: { attempt: r.attempt, next_attempt_at: r.before },
      after: { next_attempt_at: r.next_attempt_at },
    });
    return { ...r, auditId };
  });
  await scheduler.schedule({
    consumer: request.consumer,
    eventId: request.eventId,
    attempt: row.attempt,
    dueAt: row.next_attempt_at.getTime(),
  });
  return {
    consumer: request.consumer,
    eventId: request.eventId,
    attempt: row.attempt,
    dueAt: row.next_attempt_at,
    auditId: row.auditId,
  };
}
