import type { Sql } from '../db/connect.ts';
import {
  extendLegacyBound,
  PARTITIONED_TABLES,
  premakePartitions,
  type PartitionedTable,
} from '../queries/partitions.ts';
import { lastScheduledRun } from '../queries/retention-ledger.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { PartitionOptions } from './partition-options.ts';
import type { RetentionPolicy } from './policy.ts';
import { runRetention } from './run.ts';

export interface PartitionMaintenanceDeps {
  sql: Sql;
  options: PartitionOptions;
  log: Logger;
  /** Runs retention once a day under this policy (one process runs it: the others find it done or running). */
  retention?: RetentionPolicy;
}

const DAY_MS = 86_400_000;

/**
 * Keeps the partitions in order, in every long-running role (relay, consumer, `postbox start`): the next periods
 * made ahead, the bound of a conversion left half done moved on, and once a day a retention run. Any one process
 * running is enough; processes doing it at once do each thing once (SQL advisory locks). A failed check is
 * logged and tried again at the next one; rows meanwhile go to the partitions made ahead, then to the default,
 * never nowhere. One check at a time.
 */
export class PartitionMaintenance {
  readonly #deps: PartitionMaintenanceDeps;
  #timer: NodeJS.Timeout | null = null;
  #running: Promise<unknown> = Promise.resolve();
  #stopped = false;

  constructor(deps: PartitionMaintenanceDeps) {
    this.#deps = deps;
  }

  /** Checks once now (a failure is logged, not thrown: the role it runs in goes on), then every `checkMs`. */
  async start(): Promise<void> {
    await this.#check();
    if (this.#stopped) return;
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

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await this.#running;
  }

  #check(): Promise<unknown> {
    const run = this.#running.then(async () => {
      if (this.#stopped) return;
      try {
        const made = await this.runOnce();
        if (made.message_outbox + made.message_inbox > 0) this.#deps.log.info({ made }, 'partitions made ahead');
      } catch (cause) {
        this.#deps.log.warn({ err: String(cause) }, 'could not make the partitions ahead; trying again later');
      }
      await this.#dailyRetention();
    });
    this.#running = run;
    return run;
  }

  /** A retention run when none finished in the last day (a failed one is tried again at the next check). */
  async #dailyRetention(): Promise<void> {
    const { sql, retention, log } = this.#deps;
    if (!retention || this.#stopped) return;
    try {
      const last = await lastScheduledRun(sql);
      if (last && Date.now() - last.getTime() < DAY_MS) return;
      const report = await runRetention(sql, { policy: retention, trigger: 'schedule', actor: 'postbox-schedule' });
      if (report.status === 'finished')
        log.info(
          { runId: report.runId, dropped: report.partitions.filter((p) => p.outcome === 'dropped').length },
          'retention run finished',
        );
    } catch (cause) {
      log.warn({ err: String(cause) }, 'the daily retention run failed; trying again at the next check');
    }
  }
}
