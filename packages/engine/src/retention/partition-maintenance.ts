import type { Sql } from '../db/connect.ts';
import { PARTITIONED_TABLES, premakePartitions, type PartitionedTable } from '../queries/partitions.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { PartitionOptions } from './partition-options.ts';

export interface PartitionMaintenanceDeps {
  sql: Sql;
  options: PartitionOptions;
  log: Logger;
}

/**
 * Keeps the partitions of the next periods made, in every long-running role (relay, consumer, `postbox start`):
 * any one process running is enough, and processes doing it at once make each partition once (the SQL function
 * serialises them). A failed check is logged and tried again at the next one; the rows meanwhile go to the
 * partitions made ahead, then to the default partition, never nowhere. One check at a time.
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
    const { sql, options } = this.#deps;
    const made = {} as Record<PartitionedTable, number>;
    for (const table of PARTITIONED_TABLES)
      made[table] = await premakePartitions(sql, table, options.periodSeconds, options.ahead);
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
    });
    this.#running = run;
    return run;
  }
}
