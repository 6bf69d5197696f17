import type { PayloadKeyRing } from '../crypto/payload-keys.ts';
import type { Sql } from '../db/connect.ts';
import type { InboundRecord } from '../ports/subscriber.ts';
import { processRetry } from './process-retry.ts';
import { reconcileLedger } from '../retry/reconcile.ts';
import type { RetryJob, RetryScheduler } from '../ports/retry-scheduler.ts';
import type { Logger } from '../telemetry/logger.ts';
import { recordConsumeTask, recordRetryOutcome } from '../telemetry/metrics.ts';
import { failpoint } from '../testing/failpoint.ts';
import type { ConsumerDefinition } from './definition.ts';
import type { ConsumeExecutor } from './executor.ts';
import type { ConsumerCounters } from './stats.ts';
import { encodeTask, type WireRecord } from '../records/wire.ts';

/** Durable retries of one consumer: where the ledger lives, the alarm clock, how often they are reconciled. */
export interface DurableRetryConfig {
  scheduler: RetryScheduler;
  sql: Sql;
  /** @defaultValue 60000 */
  reconcileIntervalMs?: number;
  /** Opens and seals the ledger's records and the failures it writes. @defaultValue null: in clear */
  payloadKeys?: PayloadKeyRing | null;
}

/**
 * A consumer's durable retries: due jobs run through the executor (the same engine-owned transaction as a first
 * delivery) and the ledger row decides what each does (retry/process-retry.ts); new retries are enqueued after
 * their ledger row committed; and the ledger is reconciled now and then, so a job lost with Redis comes back.
 * Owns the scheduler: `close()` closes it.
 */
export class DurableRetries {
  readonly #config: DurableRetryConfig;
  readonly #definition: ConsumerDefinition;
  readonly #executor: ConsumeExecutor;
  readonly #log: Logger;
  readonly #counters: ConsumerCounters;
  #reconcileTimer: NodeJS.Timeout | null = null;

  constructor(
    config: DurableRetryConfig,
    definition: ConsumerDefinition,
    executor: ConsumeExecutor,
    log: Logger,
    counters: ConsumerCounters,
  ) {
    this.#config = config;
    this.#definition = definition;
    this.#executor = executor;
    this.#log = log;
    this.#counters = counters;
  }

  get sql(): Sql {
    return this.#config.sql;
  }

  /** Starts running due jobs and the periodic reconciliation (the first one at once). */
  start(): void {
    const { scheduler, sql } = this.#config;
    const consumer = this.#definition.name;
    scheduler.start(
      async (job) => {
        const deps = {
          sql,
          consumer,
          scheduler,
          budget: this.#definition.retry,
          definition: this.#definition,
          run: this.#run,
          payloadKeys: this.#config.payloadKeys ?? null,
        };
        const outcome = await processRetry(deps, job);
        this.#counters.retriesRun[outcome]++;
        recordRetryOutcome(consumer, outcome);
        if (outcome !== 'stale') this.#log.info({ event_id: job.eventId, attempt: job.attempt, outcome }, 'retry ran');
      },
      (job, error, attemptsMade) => {
        const cause = error.cause === undefined ? undefined : String(error.cause);
        this.#log.warn(
          { event_id: job?.eventId, attempt: job?.attempt, runs: attemptsMade, err: String(error), cause },
          'retry run failed; the job runs again (or reconciliation enqueues it)',
        );
      },
    );
    void this.#reconcile();
    this.#reconcileTimer = setInterval(() => void this.#reconcile(), this.#config.reconcileIntervalMs ?? 60_000);
    this.#reconcileTimer.unref();
  }

  /**
   * The ledger row is committed; now the alarm. If Redis is away the row is still the truth: reconciliation
   * enqueues the job later, so the offset may move on either way.
   */
  enqueue(job: Omit<RetryJob, 'consumer'>): void {
    failpoint('retry.after-ledger-before-enqueue');
    this.#config.scheduler.schedule({ consumer: this.#definition.name, ...job }).catch((cause: unknown) => {
      this.#log.warn(
        { err: String(cause), event_id: job.eventId, attempt: job.attempt },
        'could not enqueue the retry job; reconciliation will',
      );
    });
  }

  /** Stops reconciling; due retries in progress finish, later ones wait in Redis for a restart. */
  async close(): Promise<void> {
    if (this.#reconcileTimer) clearInterval(this.#reconcileTimer);
    this.#reconcileTimer = null;
    await this.#config.scheduler.close();
  }

  readonly #run = async (record: InboundRecord, attempt: number, traceparent?: string) => {
    const wire: WireRecord[] = [{ ...record, attempt, retry: true }];
    const dispatched = performance.now();
    const result = await this.#executor.run({ ...encodeTask(wire, true), ...(traceparent ? { traceparent } : {}) });
    const scope = { consumer: this.#definition.name, groupId: this.#definition.groupId };
    recordConsumeTask(scope, wire, result.results, performance.now() - dispatched);
    return result.results[0]!;
  };

  #reconcile(): Promise<void> {
    return reconcileLedger(this.#config.sql, this.#config.scheduler).then(
      (report) => {
        this.#counters.retriesReconciled += report.reenqueued;
        if (report.reenqueued > 0)
          this.#log.warn({ ...report }, 'retry ledger reconciled: jobs were missing and were enqueued again');
      },
      (cause: unknown) => this.#log.warn({ err: String(cause) }, 'retry ledger reconciliation failed; will try again'),
    );
  }
}
