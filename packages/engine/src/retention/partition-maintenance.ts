import type { Sql } from '../db/connect.ts';
import type { TopicRetention } from '../ports/offsets.ts';
import { tryLockJob } from '../queries/job-lock.ts';
import {
  extendLegacyBound,
  ownsPartitionedTables,
  PARTITIONED_TABLES,
  premakePartitions,
  type PartitionedTable,
} from '../queries/partitions.ts';
import { lastScheduledRun } from '../queries/retention-ledger.ts';
import type { Logger } from '../telemetry/logger.ts';
import { observeStorage } from '../telemetry/metrics.ts';
import type { PartitionOptions } from './partition-options.ts';
import type { RetentionPolicy } from './policy.ts';
import { runRetention } from './run.ts';

export interface PartitionMaintenanceDeps {
  sql: Sql;
  options: PartitionOptions;
  log: Logger;
  /** Runs retention once a day under this policy (one process runs it: the others find it done or running). */
  retention?: RetentionPolicy;
  /** The broker's retention of the consumed topics, which the inbox window must cover (run.ts). */
  brokerRetention?: (topics: string[]) => Promise<TopicRetention[]>;
}

const DAY_MS = 86_400_000;
/** After a failed daily run, the next try waits this long (each try plans first, which reads the old partitions). */
const RETRY_AFTER_FAILURE_MS = 3_600_000;

/**
 * Keeps the partitions in order, in every long-running role (relay, consumer, `postbox start`): the next periods
 * made ahead and the bound of a conversion left half done moved on, at every check; and once a day a retention
 * run, in the background (a start never waits for it; a stop ends it between two partitions). Any one process
 * running is enough; processes doing it at once do each thing once (advisory locks). A failed check is logged and
 * tried again at the next one; rows meanwhile go to the partitions made ahead, then to the default, never nowhere.
 */
export class PartitionMaintenance {
  readonly #deps: PartitionMaintenanceDeps;
  readonly #stop = new AbortController();
  #timer: NodeJS.Timeout | null = null;
  #checking: Promise<unknown> = Promise.resolve();
  #retention: Promise<void> | null = null;
  #retentionNotBefore = 0;
  #unobserve: (() => void) | null = null;

  constructor(deps: PartitionMaintenanceDeps) {
    this.#deps = deps;
  }

  /** Checks once now (a failure is logged, not thrown: the role it runs in goes on), then every `checkMs`. */
  async start(): Promise<void> {
    this.#unobserve = observeStorage(this, this.#deps.sql);
    await this.#check();
    if (this.#stop.signal.aborted) return;
    this.#timer = setInterval(() => void this.#check(), this.#deps.options.checkMs);
  }

  /** Makes what is missing now. Returns: partitions made, per table. Throws what the database said. */
  async runOnce(): Promise<Record<PartitionedTable, number>> {
    const { sql, options, log } = this.#deps;
    const made = {} as Record<PartitionedTable, number>;
    for (const table of PARTITIONED_TABLES) {
      if (await extendLegacyBound(sql, table))
        log.warn({ table }, 'a conversion to partitions is half done (migration 0017): run postbox migrate');
      made[table] = await premakePartitions(sql, table, options.periodSeconds, options.ahead);
    }
    return made;
  }

  /** Stops checking; a retention run in progress stops after its current partition. */
  async stop(): Promise<void> {
    this.#stop.abort();
    this.#unobserve?.();
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await this.#checking;
    await this.#retention;
  }

  /** The daily run in progress, if any (tests wait for it). */
  get retentionRun(): Promise<void> | null {
    return this.#retention;
  }

  #check(): Promise<unknown> {
    const run = this.#checking.then(async () => {
      if (this.#stop.signal.aborted) return;
      try {
        const made = await this.runOnce();
        if (made.message_outbox + made.message_inbox > 0) this.#deps.log.info({ made }, 'partitions made ahead');
      } catch (cause) {
        this.#deps.log.warn({ err: String(cause) }, 'could not make the partitions ahead; trying again later');
      }
      if (this.#deps.retention && !this.#retention && Date.now() >= this.#retentionNotBefore)
        this.#retention = this.#dailyRetention(this.#deps.retention).finally(() => (this.#retention = null));
    });
    this.#checking = run;
    return run;
  }

  /**
   * A retention run when none finished in the last day, decided under a lock of its own so two processes never
   * both decide to run; a failed run is tried again an hour later.
   */
  async #dailyRetention(policy: RetentionPolicy): Promise<void> {
    const { sql, log, brokerRetention } = this.#deps;
    try {
      if (!(await ownsPartitionedTables(sql))) {
        this.#retentionNotBefore = Number.POSITIVE_INFINITY;
        log.warn(
          {},
          'the daily retention run is off in this process: its database role does not own the tables (detach and drop need the owner); run postbox retention run as the owner, e.g. daily from cron',
        );
        return;
      }
      const release = await tryLockJob(sql, 'postbox.retention', 'schedule');
      if (!release) return;
      try {
        const last = await lastScheduledRun(sql);
        if (last && Date.now() - last.getTime() < DAY_MS) return;
        const report = await runRetention(sql, {
          policy,
          trigger: 'schedule',
          actor: 'postbox-schedule',
          signal: this.#stop.signal,
          ...(brokerRetention ? { brokerRetention } : {}),
        });
        if (report.status === 'finished')
          log.info(
            { runId: report.runId, dropped: report.partitions.filter((p) => p.outcome === 'dropped').length },
            'retention run finished',
          );
      } finally {
        await release();
      }
    } catch (cause) {
      this.#retentionNotBefore = Date.now() + RETRY_AFTER_FAILURE_MS;
      log.warn({ err: String(cause) }, 'the daily retention run did not finish; trying again in an hour');
    }
  }
}
