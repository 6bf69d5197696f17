import type { RetryJob } from '../../ports/retry-scheduler.ts';
import {
  retryRowsAt,
  type ScheduledRetryFact,
  scheduledRetriesBefore,
  scheduledRetry,
} from '../../queries/reconcile-retry.ts';
import type { CheckContext, ReconcileCheck, RepairContext, RepairOutcome, ScanPage } from '../check.ts';
import type { Finding, StoredFinding } from '../../records/finding.ts';

/** A page of scheduled ledger rows and whether each has a live alarm (delayed, waiting or running) in Redis. */
export interface RetryJobFacts {
  rows: readonly ScheduledRetryFact[];
  hasJob: ReadonlyMap<string, boolean>;
}

/**
 * retry-job-missing — every scheduled retry ledger row (the truth) has its alarm, a BullMQ job, in Redis: a row
 * without one (Redis restarted without its AOF, flushed, or the process died between the ledger write and the
 * enqueue) would never run. Rows written within the grace period are left alone (their job may be on its way).
 * Repair: re-arm the job (the scheduler's deterministic job id makes a race with the consumer's own
 * reconciliation harmless).
 */
export function judgeRetryJobs(facts: RetryJobFacts, now: number): Finding[] {
  const out: Finding[] = [];
  for (const r of facts.rows) {
    if (facts.hasJob.get(rowKey(r))) continue;
    out.push({
      key: rowKey(r),
      kind: now >= r.next_attempt_at.getTime() ? 'due_without_job' : 'scheduled_without_job',
      expected: {
        consumer: r.consumer_name,
        eventId: r.event_id,
        attempt: r.attempt,
        dueAt: r.next_attempt_at.toISOString(),
        job: 'live',
      },
      observed: {
        job: 'missing',
        aggregateId: r.aggregate_id,
        aggregateVersion: r.aggregate_version,
        overdueMs: Math.max(0, now - r.next_attempt_at.getTime()),
      },
      repairable: true,
    });
  }
  return out;
}

function rowKey(r: { consumer_name: string; event_id: string }): string {
  return `${r.consumer_name}/${r.event_id}`;
}

function jobOf(r: { consumer_name: string; event_id: string; attempt: number; next_attempt_at: Date }): RetryJob {
  return { consumer: r.consumer_name, eventId: r.event_id, attempt: r.attempt, dueAt: r.next_attempt_at.getTime() };
}

async function* scan(ctx: CheckContext): AsyncIterable<ScanPage> {
  const schedulerFor = ctx.schedulerFor!;
  const cutoff = new Date(ctx.now() - ctx.options.graceMs['retry-job-missing']);
  let after: { consumer: string; eventId: string } | null = null;
  for (;;) {
    const rows = await scheduledRetriesBefore(ctx.sql, cutoff, after, ctx.options.pageSize);
    // One page's lookups at once: a round trip each, pipelined on the scheduler's connection.
    const found = await Promise.all(rows.map((r) => schedulerFor(r.consumer_name).has(jobOf(r))));
    const hasJob = new Map(rows.map((r, i) => [rowKey(r), found[i]!] as const));
    if (rows.length > 0) yield { scanned: rows.length, findings: judgeRetryJobs({ rows, hasJob }, ctx.now()) };
    if (rows.length < ctx.options.pageSize) return;
    const last = rows[rows.length - 1]!;
    after = { consumer: last.consumer_name, eventId: last.event_id };
  }
}

/**
 * A finding the run did not observe holds again when its ledger row is gone or no longer scheduled, or was last
 * written before the grace period (the scan looked its job up and found it). A row written since — rescheduled a
 * moment ago — was not looked at: its finding stays.
 */
async function healthy(ctx: CheckContext, findings: readonly StoredFinding[], settledBefore: Date): Promise<number[]> {
  const rows = await retryRowsAt(
    ctx.sql,
    findings.map((f) => ({ consumer: f.expected.consumer as string, eventId: f.expected.eventId as string })),
  );
  const unsettled = new Set(
    rows
      .filter((r) => r.status === 'scheduled' && r.updated_at > settledBefore)
      .map((r) => rowKey({ consumer_name: r.consumer_name, event_id: r.event_id })),
  );
  return findings.filter((f) => !unsettled.has(f.key)).map((f) => f.id);
}

/** Re-arms the job of the ledger row as it is now (its attempt and due time), unless it has one again. */
async function repair(ctx: RepairContext, f: StoredFinding): Promise<RepairOutcome> {
  const { consumer, eventId } = f.expected as { consumer: string; eventId: string };
  const row = await scheduledRetry(ctx.sql, consumer, eventId);
  if (!row || row.status !== 'scheduled')
    return { outcome: 'stale', detail: `the retry is ${row?.status ?? 'gone'} now` };
  const job = jobOf({ consumer_name: consumer, event_id: eventId, ...row });
  const scheduler = ctx.schedulerFor!(consumer);
  if (await scheduler.has(job)) return { outcome: 'stale', detail: `attempt ${row.attempt} has its job again` };
  const action = `re-arm retry ${consumer}/${eventId} attempt ${row.attempt}`;
  const due = row.next_attempt_at.toISOString();
  if (ctx.dryRun) return { outcome: 'would_repair', action, detail: `no job in Redis; due ${due}` };
  const enqueued = await scheduler.ensure(job);
  const auditId = await ctx.audit(
    ctx.sql,
    'reconcile.rearm_retry',
    f,
    { job: 'missing', attempt: row.attempt, dueAt: due },
    { job: enqueued ? 'enqueued' : 'present', attempt: row.attempt, dueAt: due },
  );
  return { outcome: 'repaired', action, detail: enqueued ? `job enqueued, due ${due}` : 'the job was there', auditId };
}

export const retryJobMissing: ReconcileCheck = {
  name: 'retry-job-missing',
  description: 'every scheduled retry ledger row has its BullMQ job in Redis',
  unavailable: (ctx) => (ctx.schedulerFor ? null : 'no retry scheduler (REDIS_URL) to look jobs up in'),
  scan,
  healthy,
  repair,
};
