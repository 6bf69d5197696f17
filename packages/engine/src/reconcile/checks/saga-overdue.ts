import { overdueSagas, type SagaTimerFact, sagaMoves } from '../../queries/reconcile-sagas.ts';
import { TERMINAL } from '../../records/saga-state.ts';
import type { CheckContext, ReconcileCheck, RepairContext, RepairOutcome, ScanPage } from '../check.ts';
import type { Finding, StoredFinding } from '../../records/finding.ts';

/**
 * saga-overdue — an operator sees a frozen saga within the SLA, and sagas end by their deadline: a saga in
 * needs_attention for longer than the SLA (`needs_attention`), or not ended more than the SLA past its deadline
 * (`past_deadline`: compensating or asking for that long), is reported. Nothing here is repaired automatically —
 * a frozen saga waits for a human decision (`postbox sagas show ID`, then an action).
 */
export function judgeOverdueSagas(facts: readonly SagaTimerFact[], now: number, slaMs: number): Finding[] {
  return facts.map((s) => {
    const attention = s.status === 'needs_attention' && now - s.updated_at.getTime() > slaMs;
    return {
      key: s.saga_id,
      kind: attention ? 'needs_attention' : 'past_deadline',
      expected: attention
        ? { sagaId: s.saga_id, type: s.saga_type, decidedWithinMs: slaMs }
        : { sagaId: s.saga_id, type: s.saga_type, endedBy: iso(s.deadline_at) },
      observed: {
        status: s.status,
        ...(s.attention_reason ? { attentionReason: s.attention_reason } : {}),
        since: s.updated_at.toISOString(),
        ...(s.deadline_at ? { deadlineAt: s.deadline_at.toISOString() } : {}),
      },
      repairable: false,
    };
  });
}

function iso(d: Date | null): string | null {
  return d ? d.toISOString() : null;
}

async function* scan(ctx: CheckContext): AsyncIterable<ScanPage> {
  const slaMs = ctx.options.graceMs['saga-overdue'];
  const cutoff = new Date(ctx.now() - slaMs);
  let after = 0;
  for (;;) {
    const rows = await overdueSagas(ctx.sql, cutoff, after, ctx.options.pageSize);
    if (rows.length > 0) yield { scanned: rows.length, findings: judgeOverdueSagas(rows, ctx.now(), slaMs) };
    if (rows.length < ctx.options.pageSize) return;
    after = rows[rows.length - 1]!.seq;
  }
}

/**
 * A finding the run did not observe holds again when its saga is gone or ended, or has not moved since before
 * the SLA (the scan would have reported it frozen or past its deadline). One that moved since — decided, then
 * frozen again a moment ago — is left for a run that can judge it.
 */
async function healthy(ctx: CheckContext, findings: readonly StoredFinding[], settledBefore: Date): Promise<number[]> {
  const sagas = new Map(
    (
      await sagaMoves(
        ctx.sql,
        findings.map((f) => f.key),
      )
    ).map((s) => [s.saga_id, s]),
  );
  return findings
    .filter((f) => {
      const s = sagas.get(f.key);
      return !s || TERMINAL.has(s.status) || s.updated_at.getTime() <= settledBefore.getTime();
    })
    .map((f) => f.id);
}

async function repair(_ctx: RepairContext, f: StoredFinding): Promise<RepairOutcome> {
  return { outcome: 'manual', detail: `a decision for an operator: postbox sagas show ${f.key}` };
}

export const sagaOverdue: ReconcileCheck = {
  name: 'saga-overdue',
  description: 'no saga waits in needs_attention, or runs past its deadline, longer than the SLA',
  unavailable: () => null,
  scan,
  healthy,
  repair,
};
