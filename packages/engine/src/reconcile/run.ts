import { isConnectionLost } from '../db/connection-lost.ts';
import { abandonRuns, finishRun, insertRun, type RunTrigger, tryLockCheck } from '../queries/reconcile-run.ts';
import { resolveFindings, unobservedFindings, upsertFindings } from '../queries/reconcile-finding.ts';
import type { CheckContext, ReconcileCheck } from './check.ts';
import type { Finding } from '../records/finding.ts';

export interface CheckRunCounts {
  /** Things looked at (aggregates, ledger rows, sagas, failures). */
  scanned: number;
  /** Findings observed by this run. */
  found: number;
  /** Of those, new. */
  opened: number;
  /** Of those, repaired or resolved before and seen again (a repair that did not take). */
  reopened: number;
  /** Live findings this run did not observe, re-examined and found healthy: closed as resolved. */
  closed: number;
}

export interface CheckRunReport {
  runId: number;
  check: string;
  /** skipped: another run of the check held its lock, or the check cannot run here (see `error`). */
  status: 'finished' | 'failed' | 'skipped';
  counts: CheckRunCounts;
  error: string | null;
}

export interface RunBy {
  actor: string;
  /** @defaultValue 'on_demand' */
  trigger?: RunTrigger;
  /** Called after each page, for a progress line. */
  onPage?: (counts: Readonly<CheckRunCounts>) => void;
}

/**
 * One run of a check (mode `check`): under the check's advisory lock (one run of a check at a time across
 * processes; a second is recorded as skipped), scan page by page, upsert each page's findings by (check, key),
 * then re-examine the live findings the run did not observe and close those the check finds healthy and settled
 * (`ReconcileCheck.healthy`). Not being observed is not enough: a scan leaves alone what moved inside its grace
 * window, and closing that would read as "a repair that did not take" when it is seen again. Finds only:
 * repairs are a separate, audited step.
 *
 *   lock ──taken elsewhere──▶ skipped
 *    └──▶ running ──pages──▶ re-examine unobserved, close healthy ──▶ finished   (an error: failed, nothing closed)
 */
export async function runCheck(ctx: CheckContext, check: ReconcileCheck, by: RunBy): Promise<CheckRunReport> {
  const counts: CheckRunCounts = { scanned: 0, found: 0, opened: 0, reopened: 0, closed: 0 };
  const base = {
    check: check.name,
    mode: 'check' as const,
    trigger: by.trigger ?? 'on_demand',
    actor: by.actor,
    reason: null,
  };
  const unavailable = check.unavailable(ctx);
  if (unavailable) {
    const runId = await insertRun(ctx.sql, { ...base, status: 'skipped' });
    await finishRun(ctx.sql, runId, 'skipped', counts, unavailable);
    return { runId, check: check.name, status: 'skipped', counts, error: unavailable };
  }
  const release = await tryLockCheck(ctx.sql, check.name);
  if (!release) {
    const error = `another run of ${check.name} is in progress`;
    const runId = await insertRun(ctx.sql, { ...base, status: 'skipped' });
    await finishRun(ctx.sql, runId, 'skipped', counts, error);
    return { runId, check: check.name, status: 'skipped', counts, error };
  }
  let runId = 0;
  try {
    const settledBefore = new Date(ctx.now() - ctx.options.graceMs[check.name]);
    await abandonRuns(ctx.sql, check.name);
    runId = await insertRun(ctx.sql, base);
    for await (const page of check.scan(ctx)) {
      const findings = unique(page.findings);
      counts.scanned += page.scanned;
      counts.found += findings.length;
      const { opened, reopened } = await upsertFindings(ctx.sql, check.name, runId, findings);
      counts.opened += opened;
      counts.reopened += reopened;
      by.onPage?.(counts);
    }
    counts.closed = await closeHealthy(ctx, check, runId, settledBefore);
    await finishRun(ctx.sql, runId, 'finished', counts);
    return { runId, check: check.name, status: 'finished', counts, error: null };
  } catch (cause) {
    const error = (cause as Error)?.message ?? String(cause);
    // With the database away the run's row cannot be written: the next run of the check marks it abandoned.
    if (runId && !isConnectionLost(cause)) await finishRun(ctx.sql, runId, 'failed', counts, error).catch(() => {});
    return { runId, check: check.name, status: 'failed', counts, error };
  } finally {
    await release();
  }
}

/** The live findings the run did not observe, a page at a time: those the check finds healthy are resolved. */
async function closeHealthy(
  ctx: CheckContext,
  check: ReconcileCheck,
  runId: number,
  settledBefore: Date,
): Promise<number> {
  if (!check.healthy) return 0;
  let closed = 0;
  for (let after = 0; ; ) {
    const page = await unobservedFindings(ctx.sql, check.name, runId, after, ctx.options.pageSize);
    if (page.length === 0) return closed;
    closed += await resolveFindings(ctx.sql, check.name, runId, await check.healthy(ctx, page, settledBefore));
    after = page[page.length - 1]!.id;
  }
}

/** One finding per key in a page (the upsert cannot touch a row twice); the last observation wins. */
function unique(findings: readonly Finding[]): Finding[] {
  return [...new Map(findings.map((f) => [f.key, f])).values()];
}
