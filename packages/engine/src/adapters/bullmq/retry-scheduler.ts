import { Queue, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { redisConnection } from './redis-connection.ts';
import type { RetryJob, RetryScheduler } from '../../ports/retry-scheduler.ts';
import { closeQuietly } from './close-quietly.ts';
import { withinRedisDeadline } from './redis-deadline.ts';

/** Where the alarms live and how many run at once. */
export interface BullmqRetrySchedulerOptions {
  redisUrl: string;
  /** The consumer whose retries this schedules: one queue per consumer, so a process runs only its own. */
  consumer: string;
  /** @defaultValue `postbox-retry.<consumer>` */
  queueName?: string;
  /** Due retries processed at once by this process. @defaultValue 1 */
  concurrency?: number;
  /** How long a queue call (schedule, ensure, has, count) may wait for Redis. @defaultValue 10000 */
  commandTimeoutMs?: number;
}

const LIVE = new Set(['delayed', 'waiting', 'active', 'prioritized', 'waiting-children']);

export function retryJobId(job: RetryJob): string {
  // BullMQ ids must not contain ':' and must not be all digits.
  return `${job.consumer.replace(/[^A-Za-z0-9_.-]/g, '_')}.${job.eventId}.${job.attempt}.${job.dueAt}`;
}

/**
 * The retry schedule's alarm clock on BullMQ: one delayed job per scheduled attempt, in one queue per consumer.
 * Job ids are deterministic — `<consumer>.<event_id>.<attempt>.<due ms>` — so scheduling the same attempt twice
 * (a crash between ledger write and enqueue, or reconciliation) makes one job. Durable only with Redis AOF and
 * `noeviction` (the local stack runs it so).
 */
export class BullmqRetryScheduler implements RetryScheduler {
  readonly consumer: string;
  readonly queueName: string;
  readonly #queueConnection: Redis;
  readonly #queue: Queue;
  readonly #options: BullmqRetrySchedulerOptions;
  #worker: Worker | null = null;
  #workerConnection: Redis | null = null;
  #closed: Promise<void> | null = null;

  constructor(options: BullmqRetrySchedulerOptions) {
    this.#options = options;
    this.consumer = options.consumer;
    this.queueName = options.queueName ?? `postbox-retry.${options.consumer.replace(/[^A-Za-z0-9_.-]/g, '_')}`;
    // Queue calls fail fast while Redis is away (the ledger keeps the truth; reconciliation re-enqueues).
    this.#queueConnection = redisConnection(options.redisUrl, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      lazyConnect: false,
    });
    this.#queueConnection.on('error', () => {});
    this.#queue = new Queue(this.queueName, { connection: this.#queueConnection });
    this.#queue.on('error', () => {});
  }

  /** Enqueues (or keeps, if it exists) the job for this attempt, due at `job.dueAt`. */
  async schedule(job: RetryJob): Promise<void> {
    // Built field by field, so nothing a caller spread into `job` reaches Redis.
    const data: RetryJob = {
      consumer: job.consumer,
      eventId: job.eventId,
      attempt: job.attempt,
      dueAt: job.dueAt,
      ...(job.traceparent ? { traceparent: job.traceparent } : {}),
    };
    await this.#within(
      this.#queue.add('retry', data, {
        jobId: retryJobId(job),
        delay: Math.max(0, job.dueAt - Date.now()),
        removeOnComplete: true,
        removeOnFail: 1000,
        // A processor that could not reach PostgreSQL tries again; after that, reconciliation finds the row overdue.
        attempts: 3,
        backoff: { type: 'exponential', delay: 2000 },
      }),
      `scheduling retry ${retryJobId(job)}`,
    );
  }

  #within<T>(call: Promise<T>, what: string): Promise<T> {
    return withinRedisDeadline(
      call,
      this.#options.commandTimeoutMs ?? 10_000,
      what,
      () => this.#queueConnection.status !== 'ready',
    );
  }

  /**
   * Makes sure the job of this attempt is live (waiting, delayed or running): a job that failed for good, or is
   * missing, is (re)enqueued. Returns whether it had to be.
   */
  async ensure(job: RetryJob): Promise<boolean> {
    const live = await this.#within(this.#live(job, true), `checking retry ${retryJobId(job)}`);
    if (live) return false;
    await this.schedule(job);
    return true;
  }

  /** Whether the job is live; with `removeDead`, a job that is there but not live is removed. */
  async #live(job: RetryJob, removeDead: boolean): Promise<boolean> {
    const found = await this.#queue.getJob(retryJobId(job));
    if (!found) return false;
    if (LIVE.has(await found.getState())) return true;
    if (removeDead) await found.remove().catch(() => {});
    return false;
  }

  /** Whether the job of this attempt is still waiting, delayed or running. */
  has(job: RetryJob): Promise<boolean> {
    return this.#within(this.#live(job, false), `checking retry ${retryJobId(job)}`);
  }

  /** Jobs waiting for their time (for gauges). */
  delayedCount(): Promise<number> {
    return this.#within(this.#queue.getDelayedCount(), 'counting delayed retries');
  }

  /**
   * Starts processing due jobs. `process` must be idempotent: it reads the ledger row and acts only if due.
   * `onFailed` hears of every run that threw (BullMQ tries a job 3 times; reconciliation enqueues it again after).
   */
  start(
    process: (job: RetryJob) => Promise<void>,
    onFailed?: (job: RetryJob | undefined, error: Error, attemptsMade: number) => void,
  ): void {
    if (this.#worker) throw new Error('retry scheduler already started');
    this.#workerConnection = redisConnection(this.#options.redisUrl, { maxRetriesPerRequest: null });
    this.#workerConnection.on('error', () => {});
    this.#worker = new Worker(this.queueName, async (j: Job<RetryJob>) => process(j.data), {
      connection: this.#workerConnection,
      concurrency: this.#options.concurrency ?? 1,
      autorun: true,
      // A job whose process died (kill -9, OOM) stays "active" until its lock expires and the stalled check of
      // another worker moves it back: BullMQ's 30 s + 30 s would make a retry a minute late. Running a job twice
      // is harmless (the ledger row decides), so the lock is short.
      lockDuration: 10_000,
      stalledInterval: 5000,
    });
    this.#worker.on('error', () => {});
    if (onFailed) this.#worker.on('failed', (j, error) => onFailed(j?.data, error, j?.attemptsMade ?? 0));
  }

  close(): Promise<void> {
    this.#closed ??= (async () => {
      if (this.#worker && this.#workerConnection) await closeQuietly(this.#worker, this.#workerConnection);
      await closeQuietly(this.#queue, this.#queueConnection);
    })();
    return this.#closed;
  }
}
