import type { Sql } from '../db/connect.ts';
import { NotFoundError } from '../errors.ts';
import { insertAudit } from '../queries/audit.ts';
import type { RetryScheduler } from '../ports/retry-scheduler.ts';
import { requireRegisteredConsumer } from './registered-consumer.ts';

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
 * job for the new due time is enqueued. The old job finds a due time that no longer matches and does nothing. A
 * consumer that never registered is refused first (NotFoundError), and the scheduler is asked for only once the
 * ledger row moved: nothing is opened for a name that has nothing to retry.
 */
export async function retryNow(
  sql: Sql,
  schedulerFor: (consumer: string) => RetryScheduler,
  request: RetryNowRequest,
): Promise<RetryNowResult> {
  await requireRegisteredConsumer(sql, request.consumer);
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
  await schedulerFor(request.consumer).schedule({
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
