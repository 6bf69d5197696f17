import { sagaMoves, type SagaTimerFact, sagaTimerFact, unfiredSagaTimers } from '../../queries/reconcile-sagas.ts';
import { TERMINAL } from '../../records/saga-state.ts';
import type { CheckContext, ReconcileCheck, RepairContext, RepairOutcome, ScanPage } from '../check.ts';
import type { Finding, StoredFinding } from '../../records/finding.ts';
import { isolateTimerFailure } from '../../saga/timer-failure.ts';
import { transact } from './support.ts';

/**
 * saga-timer-unfired — a saga's timers are its row's `due_at` and `deadline_at` (SagaTimerRunner fires them within
 * a second): an unfinished saga whose command is overdue, or a running one past its deadline, by more than the
 * grace period means no timer runner is firing. Repair: fire that saga's timer through the orchestrator
 * (onTimer: the row locked, the transition fenced by the saga's version, so it fires once).
 * `canAct` says whether this process loads the saga's definition (else the finding is for an operator).
 */
export function judgeSagaTimers(
  facts: readonly SagaTimerFact[],
  now: number,
  canAct: (type: string, version: number) => boolean,
): Finding[] {
  return facts.map((s) => {
    const deadline = s.status === 'running' && s.deadline_at !== null && s.deadline_at.getTime() <= now;
    const at =
      deadline && (s.due_at === null || s.deadline_at!.getTime() <= s.due_at.getTime()) ? s.deadline_at! : s.due_at!;
    return {
      key: s.saga_id,
      kind: deadline && at === s.deadline_at ? 'deadline_unfired' : 'timeout_unfired',
      expected: { sagaId: s.saga_id, type: s.saga_type, fired: 'by the timer runner within the grace period' },
      observed: {
        status: s.status,
        version: s.version,
        dueAt: iso(s.due_at),
        deadlineAt: iso(s.deadline_at),
        overdueMs: now - at.getTime(),
      },
      repairable: canAct(s.saga_type, s.definition_version),
    };
  });
}

function iso(d: Date | null): string | null {
  return d ? d.toISOString() : null;
}

async function* scan(ctx: CheckContext): AsyncIterable<ScanPage> {
  const cutoff = new Date(ctx.now() - ctx.options.graceMs['saga-timer-unfired']);
  const canAct = (type: string, version: number) => !!ctx.sagas?.definitionOf({ type, definitionVersion: version });
  let after = 0;
  for (;;) {
    const rows = await unfiredSagaTimers(ctx.sql, cutoff, after, ctx.options.pageSize);
    if (rows.length > 0) yield { scanned: rows.length, findings: judgeSagaTimers(rows, ctx.now(), canAct) };
    if (rows.length < ctx.options.pageSize) return;
    after = rows[rows.length - 1]!.seq;
  }
}

async function repair(ctx: RepairContext, f: StoredFinding): Promise<RepairOutcome> {
  const sagas = ctx.sagas;
  if (!sagas)
    return { outcome: 'manual', detail: 'no saga definitions loaded (POSTBOX_SAGA_MODULES): start a timer runner' };
  const now = ctx.now();
  let firing: { sagaId: string; version: number } | null = null;
  try {
    return await transact(ctx, async (tx) => {
      const s = await sagaTimerFact(tx, f.key);
      if (!s || !overdue(s, now - ctx.options.graceMs['saga-timer-unfired']))
        return { outcome: 'stale', detail: `saga ${f.key} is ${s?.status ?? 'gone'}, its timer not overdue` };
      const action = `fire timer of saga ${s.saga_id} (v${s.version})`;
      if (ctx.dryRun) return { outcome: 'would_repair', action, detail: `${s.status}, due ${iso(s.due_at)}` };
      firing = { sagaId: s.saga_id, version: s.version };
      const fired = await sagas.onTimer(tx, s.saga_id, s.version, now);
      firing = null; // what fails from here on is the repair's, not the saga's
      if (fired === 'stale') return { outcome: 'stale', detail: `saga ${s.saga_id} moved on before its timer fired` };
      const after = await sagaTimerFact(tx, s.saga_id);
      const auditId = await ctx.audit(tx, 'reconcile.fire_saga_timer', f, brief(s), brief(after!));
      return { outcome: 'repaired', action, detail: `${s.status} → ${after!.status}`, auditId };
    });
  } catch (cause) {
    // The saga's own transition threw: isolate it as the timer runner does (frozen for an operator, or pushed
    // back), so one bad saga neither fails the pass (canary, error ratio) nor stops the findings after it.
    if (!firing) throw cause;
    const isolated = await isolateTimerFailure(ctx.sql, firing, cause, now);
    if (isolated.outcome === 'frozen')
      return { outcome: 'manual', detail: `frozen as needs_attention (${isolated.reason}): ${isolated.detail}` };
    if (isolated.outcome === 'deferred')
      return {
        outcome: 'stale',
        detail: `its transition failed transiently (${isolated.detail}): timer pushed back to ${isolated.dueAt.toISOString()}`,
      };
    return { outcome: 'stale', detail: isolated.detail };
  }
}

/**
 * A finding the run did not observe holds again when its saga is gone or ended, or has not moved since before the
 * grace period (the scan covers every saga overdue by then, so it would have reported it). One that moved since
 * is left for a run that can judge it.
 */
async function healthy(ctx: CheckContext, findings: readonly StoredFinding[], settledBefore: Date): Promise<number[]> {
  const moves = await sagaMoves(
    ctx.sql,
    findings.map((f) => f.key),
  );
  const sagas = new Map(moves.map((s) => [s.saga_id, s]));
  return findings
    .filter((f) => {
      const s = sagas.get(f.key);
      return !s || TERMINAL.has(s.status) || s.updated_at.getTime() <= settledBefore.getTime();
    })
    .map((f) => f.id);
}

function overdue(s: SagaTimerFact, cutoff: number): boolean {
  const live = s.status === 'running' || s.status === 'resolving' || s.status === 'compensating';
  return (
    (live && s.due_at !== null && s.due_at.getTime() <= cutoff) ||
    (s.status === 'running' && s.deadline_at !== null && s.deadline_at.getTime() <= cutoff)
  );
}

function brief(s: SagaTimerFact): Record<string, unknown> {
  return { status: s.status, version: s.version, dueAt: iso(s.due_at), deadlineAt: iso(s.deadline_at) };
}

export const sagaTimerUnfired: ReconcileCheck = {
  name: 'saga-timer-unfired',
  description: "unfinished sagas' timers (due_at, deadline_at) fire within the grace period: a timer runner runs",
  unavailable: () => null,
  scan,
  healthy,
  repair,
};
