import type { Queryable } from '../db/connect.ts';
import {
  consumerEventRows,
  readOutboxEvent,
  type ConsumerEventRow,
  type OutboxEventRow,
} from '../queries/event-status.ts';

export type ConsumerEventState = 'pending' | 'applied' | 'duplicate' | 'parked' | 'retrying' | 'failed' | 'skipped';

export interface ConsumerEventStatus {
  consumer: string;
  state: ConsumerEventState;
  processedAt: Date | null;
  /** Deliveries after the first, absorbed by the inbox. */
  duplicateDeliveries: number;
  retryAttempt: number | null;
  nextRetryAt: Date | null;
  failureId: number | null;
  errorCode: string | null;
  /** The consumer's applied version of the aggregate. */
  aggregateVersionApplied: number | null;
}

export interface EventStatus {
  eventId: string;
  /** Null when the event was not written through this outbox (produced elsewhere, or pruned). */
  outbox: OutboxEventRow | null;
  consumers: ConsumerEventStatus[];
}

/**
 * Where one event is: its outbox state and broker position, and for every consumer the stage it reached.
 * A consumer whose registered topics do not include the event's topic is left out.
 */
export async function eventStatus(sql: Queryable, eventId: string): Promise<EventStatus | null> {
  const outbox = (await readOutboxEvent(sql, eventId)) ?? null;
  const rows = await consumerEventRows(sql, eventId, outbox?.aggregate_id ?? null);
  const consumers = rows
    .filter(
      (r) =>
        outbox === null ||
        r.topics === null ||
        r.topics.includes(outbox.topic) ||
        r.processed_at !== null ||
        r.failure_id !== null,
    )
    .map(toStatus)
    .filter((s) => outbox !== null || s.state !== 'pending');
  if (outbox === null && consumers.length === 0) return null;
  return { eventId, outbox, consumers };
}

/** The stage a consumer reached, from the rows each stage leaves (most pressing first). */
export function consumerState(
  r: Pick<ConsumerEventRow, 'failure_status' | 'retry_status' | 'parked_at' | 'processed_at' | 'duplicate_deliveries'>,
): ConsumerEventState {
  if (r.failure_status === 'open' || r.failure_status === 'expired') return 'failed';
  if (r.retry_status === 'scheduled') return 'retrying';
  if (r.parked_at !== null) return 'parked';
  if (r.failure_status === 'skipped') return 'skipped';
  if (r.processed_at !== null) return (r.duplicate_deliveries ?? 0) > 0 ? 'duplicate' : 'applied';
  return 'pending';
}

function toStatus(r: ConsumerEventRow): ConsumerEventStatus {
  return {
    consumer: r.consumer_name,
    state: consumerState(r),
    processedAt: r.processed_at,
    duplicateDeliveries: r.duplicate_deliveries ?? 0,
    retryAttempt: r.retry_status === 'scheduled' ? r.retry_attempt : null,
    nextRetryAt: r.retry_status === 'scheduled' ? r.retry_next_at : null,
    failureId: r.failure_id,
    errorCode: r.failure_error_code ?? (r.retry_status === 'scheduled' ? r.retry_error_code : null),
    aggregateVersionApplied: r.last_version,
  };
}
