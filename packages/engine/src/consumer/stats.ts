import type { PartitionLag } from '../ports/subscriber.ts';
import type { RetryProcessOutcome } from './process-retry.ts';
import type { Outcome } from '../records/wire.ts';

/** A consumer's counters and gauges, as `Consumer.stats()` reports them. */
export interface ConsumerStats {
  consumer: string;
  state: string;
  received: number;
  applied: number;
  duplicates: number;
  ignored: number;
  parked: number;
  drained: number;
  failed: number;
  transientRetries: number;
  /** Transient failures handed to the durable schedule (ledger row + job). */
  retriesScheduled: number;
  /** Due retries run by this process, by how they ended. */
  retriesRun: Record<RetryProcessOutcome, number>;
  /** Ledger rows whose job was missing and was enqueued again by reconciliation. */
  retriesReconciled: number;
  /** Worker tasks dispatched so far. */
  tasks: number;
  /** Worker tasks running now. */
  tasksRunning: number;
  /** Partitions this member holds now (0 between a member's crash and its rejoin). */
  assigned: number;
  commits: number;
  pauses: number;
  paused: boolean;
  inFlightEvents: number;
  inFlightBytes: number;
  /** Last fetched lag per partition (empty until fetched). */
  lag: PartitionLag[];
  totalLag: number;
}

/** The counters a consumer keeps; the gauges are read from their owners when stats are taken. */
export class ConsumerCounters {
  received = 0;
  applied = 0;
  duplicates = 0;
  ignored = 0;
  parked = 0;
  drained = 0;
  failed = 0;
  transientRetries = 0;
  retriesScheduled = 0;
  retriesRun: Record<RetryProcessOutcome, number> = { stale: 0, settled: 0, rescheduled: 0, exhausted: 0, expired: 0 };
  retriesReconciled = 0;
  tasks = 0;
  pauses = 0;

  /** Counts one settled outcome and the parked successors it drained. */
  count(outcome: Outcome, drained: number): void {
    if (outcome === 'applied') this.applied++;
    else if (outcome === 'duplicate') this.duplicates++;
    else if (outcome === 'ignored') this.ignored++;
    else if (outcome === 'parked') this.parked++;
    else if (outcome === 'failed') this.failed++;
    else if (outcome === 'scheduled') this.retriesScheduled++;
    this.drained += drained;
  }

  snapshot(): Omit<
    ConsumerStats,
    | 'consumer'
    | 'state'
    | 'tasksRunning'
    | 'assigned'
    | 'commits'
    | 'paused'
    | 'inFlightEvents'
    | 'inFlightBytes'
    | 'lag'
    | 'totalLag'
  > {
    return {
      received: this.received,
      applied: this.applied,
      duplicates: this.duplicates,
      ignored: this.ignored,
      parked: this.parked,
      drained: this.drained,
      failed: this.failed,
      transientRetries: this.transientRetries,
      retriesScheduled: this.retriesScheduled,
      retriesRun: { ...this.retriesRun },
      retriesReconciled: this.retriesReconciled,
      tasks: this.tasks,
      pauses: this.pauses,
    };
  }
}
