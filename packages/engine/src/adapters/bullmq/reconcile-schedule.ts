import { Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { redisConnection } from './redis-connection.ts';
import { ConfigError } from '../../errors.ts';
import { CHECK_NAMES, type CheckName } from '../../records/finding.ts';
import type { Reconciler } from '../../reconcile/reconciler.ts';
import type { CheckRunReport } from '../../reconcile/run.ts';
import { type Logger, silentLogger } from '../../telemetry/logger.ts';
import { closeQuietly } from './close-quietly.ts';

export interface ReconcileScheduleOptions {
  redisUrl: string;
  reconciler: Reconciler;
  /** How often each check runs, ms (one number for all, or per check). @defaultValue 300000 */
  everyMs?: number | Partial<Record<CheckName, number>>;
  /** @defaultValue every check */
  checks?: readonly CheckName[];
  /** @defaultValue 'postbox-reconcile' */
  queueName?: string;
  /** The actor of scheduled runs in reconciliation_run. @defaultValue 'postbox-schedule' */
  actor?: string;
  /** Called after every scheduled run. */
  onRun?: (report: CheckRunReport) => void;
  log?: Logger;
}

/**
 * Scheduled reconciliation: one BullMQ job scheduler (a repeatable job) per check in one queue, so any number of
 * processes may run the schedule and each tick becomes one job, run by one of them; the check's advisory lock
 * (run.ts) keeps a slow run and the next tick from overlapping (the tick is recorded as skipped). Scheduled runs
 * find only: repairs stay an operator's decision (dry run first).
 */
export class ReconcileSchedule {
  readonly queueName: string;
  readonly #options: ReconcileScheduleOptions;
  readonly #queueConnection: Redis;
  readonly #queue: Queue;
  #worker: Worker | null = null;
  #workerConnection: Redis | null = null;
  #closed: Promise<void> | null = null;

  constructor(options: ReconcileScheduleOptions) {
    this.#options = options;
    this.queueName = options.queueName ?? 'postbox-reconcile';
    for (const name of options.checks ?? [])
      if (!(CHECK_NAMES as readonly string[]).includes(name))
        throw new ConfigError(`reconcile schedule: unknown check "${name}" (${CHECK_NAMES.join(', ')})`);
    this.#queueConnection = redisConnection(options.redisUrl, { maxRetriesPerRequest: 1 });
    this.#queueConnection.on('error', () => {});
    this.#queue = new Queue(this.queueName, { connection: this.#queueConnection });
    this.#queue.on('error', () => {});
  }

  /** Upserts each check's job scheduler and starts running due ticks. */
  async start(): Promise<void> {
    if (this.#worker) throw new ConfigError('reconcile schedule already started');
    const checks = this.#options.checks ?? CHECK_NAMES;
    for (const check of checks) {
      const every = this.#every(check);
      await this.#queue.upsertJobScheduler(`reconcile.${check}`, { every }, { name: 'reconcile', data: { check } });
    }
    const log = this.#options.log ?? silentLogger;
    this.#workerConnection = redisConnection(this.#options.redisUrl, { maxRetriesPerRequest: null });
    this.#workerConnection.on('error', () => {});
    this.#worker = new Worker(
      this.queueName,
      async (job) => {
        const report = await this.#options.reconciler.run(job.data.check as CheckName, {
          actor: this.#options.actor ?? 'postbox-schedule',
          trigger: 'scheduled',
        });
        if (report.status === 'failed')
          log.warn({ check: report.check, err: report.error }, 'reconciliation run failed');
        else if (report.counts.found > 0)
          log.warn({ check: report.check, ...report.counts }, 'reconciliation found broken invariants');
        this.#options.onRun?.(report);
      },
      { connection: this.#workerConnection, concurrency: 1 },
    );
    this.#worker.on('error', () => {});
  }

  #every(check: CheckName): number {
    const e = this.#options.everyMs;
    const ms = typeof e === 'number' ? e : (e?.[check] ?? 300_000);
    if (!Number.isInteger(ms) || ms < 1000)
      throw new ConfigError(`reconcile schedule: everyMs of ${check} must be an integer ≥ 1000, got ${ms}`);
    return ms;
  }

  /** Stops running ticks (the schedulers stay in Redis for the other processes); idempotent. */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      if (this.#worker && this.#workerConnection) await closeQuietly(this.#worker, this.#workerConnection);
      await closeQuietly(this.#queue, this.#queueConnection);
    })();
    return this.#closed;
  }
}
