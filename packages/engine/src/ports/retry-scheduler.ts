/**
 * The durable retry schedule's alarm clock. The retry ledger in PostgreSQL is the truth (which attempt is due
 * when); a scheduler only wakes the consumer when an attempt is due, so it may lose a job (reconciliation
 * re-enqueues from the ledger) or deliver one twice (the processor checks the ledger row before acting).
 *
 * Contract:
 * - `schedule` is idempotent per (consumer, event, attempt, due time): scheduling it twice makes one alarm.
 * - A job carries ids only, never payloads: the alarm's store need not be trusted with data.
 * - `start` runs `process` for due jobs of this scheduler's consumer only; a `process` that throws is retried by
 *   the scheduler (at least once delivery) and reported through `onFailed`.
 * - `close` stops taking new jobs, waits for running ones, and is idempotent.
 */
export interface RetryScheduler {
  /** The consumer whose retries this schedules. */
  readonly consumer: string;
  schedule(job: RetryJob): Promise<void>;
  /** Schedules the job when no live alarm exists for it; true when it had to. */
  ensure(job: RetryJob): Promise<boolean>;
  /** A live alarm (delayed, waiting or running) exists for this job. */
  has(job: RetryJob): Promise<boolean>;
  /** Alarms waiting for their time. */
  delayedCount(): Promise<number>;
  start(
    process: (job: RetryJob) => Promise<void>,
    onFailed?: (job: RetryJob | undefined, error: Error, attemptsMade: number) => void,
  ): void;
  close(): Promise<void>;
}

/** One scheduled attempt of one event, as the alarm carries it. */
export interface RetryJob {
  consumer: string;
  eventId: string;
  attempt: number;
  /** The ledger row's next_attempt_at (epoch ms): with the attempt it names one scheduled run exactly. */
  dueAt: number;
  /**
   * The span that scheduled this attempt (W3C traceparent), for the retry span's link. Trace context, not data:
   * job data may sit in clear text and holds ids only.
   */
  traceparent?: string;
}
