import type { Sql } from '../db/connect.ts';
import { scheduledLedgerRows } from '../queries/retry-ledger.ts';
import type { RetryScheduler } from '../ports/retry-scheduler.ts';

export interface ReconcileReport {
  checked: number;
  /** Ledger rows whose job was missing and was enqueued again. */
  reenqueued: number;
  /** The first few of those (event ids), for the log. */
  examples: string[];
}

/**
 * The ledger is the truth, the scheduler only the alarm clock: every scheduled ledger row must have its job.
 * Walks the consumer's scheduled rows in pages and enqueues the job of each row that has no live one (Redis
 * restarted without its AOF, flushed, the process died between the ledger write and the enqueue, or the job
 * failed for good because PostgreSQL was away when it fired). The deterministic job id makes a
 * race with the normal path harmless.
 */
export async function reconcileLedger(
  sql: Sql,
  scheduler: RetryScheduler,
  options: { pageSize?: number } = {},
): Promise<ReconcileReport> {
  const pageSize = options.pageSize ?? 500;
  const report: ReconcileReport = { checked: 0, reenqueued: 0, examples: [] };
  let after: string | null = null;
  for (;;) {
    const rows = await scheduledLedgerRows(sql, scheduler.consumer, pageSize, after);
    for (const row of rows) {
      report.checked++;
      const job = {
        consumer: row.consumer_name,
        eventId: row.event_id,
        attempt: row.attempt,
        dueAt: row.next_attempt_at.getTime(),
      };
      if (await scheduler.ensure(job)) {
        report.reenqueued++;
        if (report.examples.length < 5) report.examples.push(`${row.event_id}#${row.attempt}`);
      }
    }
    if (rows.length < pageSize) return report;
    after = rows[rows.length - 1]!.event_id;
  }
}
