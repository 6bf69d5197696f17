import type { Sql, Tx } from '../db/connect.ts';
import { isConnectionLost } from '../db/connection-lost.ts';
import { ConfigError } from '../errors.ts';
import { insertAudit } from '../queries/audit.ts';
import { countFindings, listFindings, setFindingStatus } from '../queries/reconcile-finding.ts';
import { abandonRuns, finishRun, insertRun, type RunTrigger, tryLockCheck } from '../queries/reconcile-run.ts';
import type { CheckContext, ReconcileCheck, RepairContext, RepairOutcome } from './check.ts';
import type { StoredFinding } from '../records/finding.ts';
import { Pacer } from './pacer.ts';
import { resolveStopPolicy, shouldStop, type StopPolicy, type StopReason } from './stop-policy.ts';

export interface RepairRequest {
  /** Only these findings (still open) of the check. @defaultValue every open finding, oldest first */
  ids?: readonly number[];
  /** At most this many items per pass. @defaultValue 1000 */
  limit?: number;
  /** @defaultValue true: re-check and report what would be done, change nothing */
  dryRun?: boolean;
  actor: string;
  /** Why (written to every audit record). */
  reason: string;
  /** Repairs started per second. @defaultValue 10 */
  ratePerSecond?: number;
  /** The first N are the canary (one failure stops the pass), then the error ratio. @defaultValue see StopPolicy */
  stop?: Partial<StopPolicy>;
  /** @defaultValue 'on_demand' */
  trigger?: RunTrigger;
  /** Called after each item. */
  onProgress?: (p: RepairProgress) => void;
}

export type ItemOutcome = RepairOutcome['outcome'] | 'failed';

export interface RepairItem {
  findingId: number;
  key: string;
  kind: string;
  outcome: ItemOutcome;
  action: string | null;
  detail: string;
  /** When the item's repair started (rate and canary are visible in these). */
  startedAt: Date;
  auditId: number | null;
}

export type RepairCounts = Record<ItemOutcome, number> & { planned: number };

export interface RepairProgress {
  done: number;
  total: number;
  counts: Readonly<RepairCounts>;
  last: RepairItem;
}

export interface RepairReport {
  runId: number;
  check: string;
  dryRun: boolean;
  /** stopped: the canary or the error ratio stopped it (`stoppedBecause`); skipped: the check's lock was held. */
  status: 'finished' | 'stopped' | 'skipped' | 'failed';
  stoppedBecause: StopReason | null;
  counts: RepairCounts;
  items: RepairItem[];
  error: string | null;
}

/**
 * A repair pass over a check's open findings (mode dry_run or execute), under the check's lock. Each item is
 * re-checked by the check's repair before anything is done (a finding gone stale is closed, never acted on);
 * executed repairs are paced (`ratePerSecond`), tried first on a canary, stopped on an error ratio, and every
 * item is audited with its before and after. A dry run writes its run record and one audit record, nothing else.
 */
export async function repairFindings(
  ctx: CheckContext,
  check: ReconcileCheck,
  request: RepairRequest,
): Promise<RepairReport> {
  const dryRun = request.dryRun ?? true;
  const limit = request.limit ?? 1000;
  if (!Number.isInteger(limit) || limit < 1 || limit > 100_000)
    throw new ConfigError(`repair limit must be an integer from 1 to 100000, got ${limit}`);
  if (!request.reason?.trim()) throw new ConfigError('a repair needs a reason (it is written to the audit log)');
  if (!request.actor?.trim()) throw new ConfigError('a repair needs an actor (it is written to the audit log)');
  const policy = resolveStopPolicy(request.stop);
  const pacer = new Pacer(request.ratePerSecond ?? 10);
  const counts: RepairCounts = { planned: 0, repaired: 0, would_repair: 0, stale: 0, manual: 0, failed: 0 };
  const mode = dryRun ? ('dry_run' as const) : ('execute' as const);
  const base = {
    check: check.name,
    mode,
    trigger: request.trigger ?? 'on_demand',
    actor: request.actor,
    reason: request.reason,
  };
  const report = (runId: number, status: RepairReport['status'], extra: Partial<RepairReport> = {}): RepairReport => ({
    runId,
    check: check.name,
    dryRun,
    status,
    stoppedBecause: null,
    counts,
    items: [],
    error: null,
    ...extra,
  });
  const release = await tryLockCheck(ctx.sql, check.name);
  if (!release) {
    const error = `another run of ${check.name} is in progress`;
    const runId = await insertRun(ctx.sql, { ...base, status: 'skipped' });
    await finishRun(ctx.sql, runId, 'skipped', counts, error);
    return report(runId, 'skipped', { error });
  }
  const items: RepairItem[] = [];
  let runId = 0;
  try {
    await abandonRuns(ctx.sql, check.name);
    runId = await insertRun(ctx.sql, base);
    const open = (await countFindings(ctx.sql, check.name)).find((c) => c.status === 'open')?.count ?? 0;
    counts.planned = Math.min(limit, request.ids ? request.ids.length : open);
    const rctx = repairContext(ctx, { dryRun, actor: request.actor, reason: request.reason, runId });
    let stoppedBecause: StopReason | null = null;
    for await (const finding of openFindings(ctx.sql, check.name, request.ids ?? null, limit)) {
      if (!dryRun) await pacer.next();
      const item = await repairOne(rctx, check, finding);
      items.push(item);
      counts[item.outcome]++;
      request.onProgress?.({ done: items.length, total: counts.planned, counts, last: item });
      if (!dryRun) stoppedBecause = shouldStop({ done: items.length, failed: counts.failed }, policy);
      if (stoppedBecause) break;
    }
    if (dryRun) {
      await insertAudit(ctx.sql, {
        actor: request.actor,
        action: 'reconcile.dry_run',
        reason: request.reason,
        target: `reconcile:${check.name}`,
        before: { open, runId },
        after: { would_repair: counts.would_repair, stale: counts.stale, manual: counts.manual, failed: counts.failed },
      });
    }
    const status = stoppedBecause ? 'stopped' : 'finished';
    await finishRun(ctx.sql, runId, status, { ...counts, ...(stoppedBecause ? { stoppedBecause } : {}) });
    return report(runId, status, { stoppedBecause, items });
  } catch (cause) {
    const error = (cause as Error)?.message ?? String(cause);
    // With the database away the run's row cannot be written: the next run of the check marks it abandoned.
    if (runId && !isConnectionLost(cause)) await finishRun(ctx.sql, runId, 'failed', counts, error).catch(() => {});
    return report(runId, 'failed', { items, error });
  } finally {
    await release();
  }
}

async function repairOne(ctx: RepairContext, check: ReconcileCheck, f: StoredFinding): Promise<RepairItem> {
  const startedAt = new Date();
  const item = (outcome: ItemOutcome, action: string | null, detail: string, auditId: number | null): RepairItem => ({
    findingId: f.id,
    key: f.key,
    kind: f.kind,
    outcome,
    action,
    detail,
    startedAt,
    auditId,
  });
  let r: RepairOutcome;
  try {
    r = await check.repair(ctx, f);
  } catch (cause) {
    // The database away is not this item's failure: every next item would wait out its deadline the same way and
    // no audit could be written. The run ends; what is left stays open for the next one.
    if (isConnectionLost(cause)) throw cause;
    const detail = (cause as Error)?.message ?? String(cause);
    if (ctx.dryRun) return item('failed', null, detail, null);
    const auditId = await ctx.audit(ctx.sql, `reconcile.${check.name}`, f, before(f), { error: detail }, 'failed');
    await setFindingStatus(ctx.sql, f.id, 'open', trace(ctx, { error: detail, auditId }));
    return item('failed', null, detail, auditId);
  }
  if (r.outcome === 'would_repair') return item(r.outcome, r.action, r.detail, null);
  if (ctx.dryRun) return item(r.outcome, null, r.detail, null);
  if (r.outcome === 'repaired') {
    await setFindingStatus(
      ctx.sql,
      f.id,
      'repaired',
      trace(ctx, { action: r.action, detail: r.detail, auditId: r.auditId }),
    );
    return item(r.outcome, r.action, r.detail, r.auditId);
  }
  // Nothing done: a stale finding is closed, one no command fits goes to an operator; both are audited.
  const outcome = r.outcome === 'stale' ? 'skipped' : 'refused';
  const auditId = await ctx.audit(ctx.sql, `reconcile.${check.name}`, f, before(f), { [r.outcome]: r.detail }, outcome);
  await setFindingStatus(
    ctx.sql,
    f.id,
    r.outcome === 'stale' ? 'resolved' : 'manual',
    trace(ctx, { detail: r.detail, auditId }),
  );
  return item(r.outcome, null, r.detail, auditId);
}

/** The open findings to repair, in id order, a page at a time. */
async function* openFindings(
  sql: Sql,
  check: string,
  ids: readonly number[] | null,
  limit: number,
): AsyncIterable<StoredFinding> {
  let after: number | null = null;
  let left = limit;
  while (left > 0) {
    const page = await listFindings(
      sql,
      { check, status: 'open', ...(ids ? { ids } : {}) },
      Math.min(100, left),
      after,
    );
    for (const f of page) yield f;
    if (page.length < Math.min(100, left)) return;
    left -= page.length;
    after = page[page.length - 1]!.id;
  }
}

function repairContext(
  ctx: CheckContext,
  by: { dryRun: boolean; actor: string; reason: string; runId: number },
): RepairContext & { audit: AuditFn } {
  const audit: AuditFn = (tx, action, f, beforeState, afterState, outcome = 'ok') =>
    insertAudit(tx, {
      actor: by.actor,
      action,
      reason: by.reason,
      target: `reconcile:${f.check}:${f.key}`,
      before: { finding: f.id, kind: f.kind, ...(beforeState as object) },
      after: afterState,
      outcome,
    });
  return { ...ctx, ...by, audit };
}

type AuditFn = (
  tx: Tx | Sql,
  action: string,
  f: StoredFinding,
  before: unknown,
  after: unknown,
  outcome?: string,
) => Promise<number>;

function before(f: StoredFinding): Record<string, unknown> {
  return { expected: f.expected, observed: f.observed };
}

function trace(ctx: RepairContext, r: Record<string, unknown>): Record<string, unknown> {
  return { ...r, actor: ctx.actor, runId: ctx.runId, at: new Date().toISOString() };
}
