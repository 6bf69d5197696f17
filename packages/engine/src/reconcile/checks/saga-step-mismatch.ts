import { ActionRefusedError } from '../../errors.ts';
import { type SagaStepsFact, sagaMoves, sagaSteps, sagaStepsOf } from '../../queries/reconcile-sagas.ts';
import { TERMINAL } from '../../records/saga-state.ts';
import type { CheckContext, ReconcileCheck, RepairContext, RepairOutcome, ScanPage } from '../check.ts';
import type { Finding, StoredFinding } from '../../records/finding.ts';
import { type ParticipantRecords, recordsStep } from '../source.ts';
import { transact } from './support.ts';

/**
 * saga-step-mismatch — a saga and its participants agree on each step: a step the saga holds as succeeded was
 * applied by its participant (its record in saga_participation says `applied`; the record is written in the
 * transaction of the step's effect, so it is the participant's own word), and a step the saga undid or was told
 * was not applied is not `applied` at the participant. Only for steps whose participants record in this
 * database (defineParticipantRecords), and only sagas that have not moved for the grace period (a reply on its
 * way is not a disagreement).
 * - `succeeded_not_applied` (the record is missing, fenced or compensated): repaired by compensating the saga
 *   (SagaOrchestrator.act 'compensate') while it can be — see docs/reconciliation.md for why that and not resolve;
 * - `compensated_but_applied` / `not_applied_but_applied`: the saga ended believing the step undone or never done,
 *   the participant kept it; the saga can no longer act — an operator undoes it by hand.
 */
export function judgeSagaSteps(
  facts: readonly SagaStepsFact[],
  participants: readonly ParticipantRecords[],
  canAct: (type: string, version: number) => boolean,
): Finding[] {
  const out: Finding[] = [];
  for (const s of facts) {
    s.names.forEach((name, i) => {
      if (!recordsStep(participants, s.saga_type, name)) return;
      const status = s.steps[i];
      const record = s.records[name] ?? null;
      let kind: string | null = null;
      if (status === 'succeeded' && record !== 'applied') {
        // Its compensation was applied and the reply is on its way: the saga catches up by itself.
        if (record === 'compensated' && s.direction === 'compensate') return;
        kind = 'succeeded_not_applied';
      } else if (
        (status === 'compensated' || status === 'not_applied' || status === 'failed') &&
        record === 'applied'
      ) {
        kind = status === 'compensated' ? 'compensated_but_applied' : 'not_applied_but_applied';
      }
      if (!kind) return;
      const compensable =
        kind === 'succeeded_not_applied' &&
        !TERMINAL.has(s.status) &&
        !s.pivot_passed &&
        s.direction !== 'compensate' &&
        canAct(s.saga_type, s.definition_version);
      out.push({
        key: `${s.saga_id}:${name}`,
        kind,
        expected: {
          sagaId: s.saga_id,
          type: s.saga_type,
          step: name,
          participant: status === 'succeeded' ? 'applied' : 'not applied',
        },
        observed: { saga: s.status, step: status, participant: record ?? 'never seen', pivotPassed: s.pivot_passed },
        repairable: compensable,
      });
    });
  }
  return out;
}

async function* scan(ctx: CheckContext): AsyncIterable<ScanPage> {
  const types = [...new Set(ctx.participants.map((p) => p.sagaType))];
  if (types.length === 0) return;
  const cutoff = new Date(ctx.now() - ctx.options.graceMs['saga-step-mismatch']);
  const canAct = (type: string, version: number) => !!ctx.sagas?.definitionOf({ type, definitionVersion: version });
  let after = 0;
  for (;;) {
    const rows = await sagaSteps(ctx.sql, types, cutoff, after, ctx.options.pageSize);
    if (rows.length > 0) yield { scanned: rows.length, findings: judgeSagaSteps(rows, ctx.participants, canAct) };
    if (rows.length < ctx.options.pageSize) return;
    after = rows[rows.length - 1]!.seq;
  }
}

/**
 * A finding the run did not observe holds again when its saga is gone, or has not moved since before
 * the grace period and its step is still one whose participant records here (the scan judged it and found the
 * saga and its participant agreeing). A saga that moved since was not judged: its finding stays.
 */
async function healthy(ctx: CheckContext, findings: readonly StoredFinding[], settledBefore: Date): Promise<number[]> {
  const sagas = new Map(
    (
      await sagaMoves(
        ctx.sql,
        findings.map((f) => f.expected.sagaId as string),
      )
    ).map((s) => [s.saga_id, s]),
  );
  return findings
    .filter((f) => {
      const s = sagas.get(f.expected.sagaId as string);
      if (!s) return true;
      if (!recordsStep(ctx.participants, s.saga_type, f.expected.step as string)) return false;
      return s.updated_at.getTime() <= settledBefore.getTime();
    })
    .map((f) => f.id);
}

/**
 * A step the saga holds as succeeded that its participant never applied: the saga compensates, by its own
 * rules. Its flow rests on a step that did not happen; it never re-sends a step forward blind, and resolve only
 * decides the step whose command is out now. Compensation undoes what did succeed, last first, and for this step
 * the participant's compensation of something it never applied succeeds with nothing to undo and fences the
 * step, so a late command is refused. Past the pivot a saga is forward-only: an operator's decision.
 */
async function repair(ctx: RepairContext, f: StoredFinding): Promise<RepairOutcome> {
  const { sagaId, step } = f.expected as { sagaId: string; step: string };
  const sagas = ctx.sagas;
  return transact(ctx, async (tx) => {
    const s = await sagaStepsOf(tx, sagaId);
    const i = s?.names.indexOf(step) ?? -1;
    if (!s || i < 0) return { outcome: 'stale', detail: `saga ${sagaId} or its step ${step} is gone` };
    // A finding from a registration that covered this step: its participant's records are not here to compare.
    if (!recordsStep(ctx.participants, s.saga_type, step))
      return { outcome: 'stale', detail: `step ${step} is not registered as recording in this database` };
    const record = s.records[step] ?? null;
    if (s.steps[i] !== 'succeeded' || record === 'applied')
      return {
        outcome: 'stale',
        detail: `step ${step} is ${s.steps[i]}, the participant says ${record ?? 'never seen'}`,
      };
    if (TERMINAL.has(s.status))
      return { outcome: 'manual', detail: `the saga is ${s.status}: undo or apply ${step} by hand` };
    if (s.pivot_passed)
      return {
        outcome: 'manual',
        detail: `the saga is past its pivot and forward-only: apply ${step} by hand, or close it`,
      };
    if (s.direction === 'compensate') return { outcome: 'stale', detail: 'the saga is compensating already' };
    if (!sagas?.definitionOf({ type: s.saga_type, definitionVersion: s.definition_version }))
      return {
        outcome: 'manual',
        detail: `this process does not load ${s.saga_type} v${s.definition_version} (POSTBOX_SAGA_MODULES)`,
      };
    const action = `compensate saga ${sagaId}`;
    if (ctx.dryRun)
      return {
        outcome: 'would_repair',
        action,
        detail: `step ${step} succeeded but the participant says ${record ?? 'never seen'}`,
      };
    try {
      const { before, after } = await sagas.act(
        tx,
        sagaId,
        { kind: 'compensate' },
        {
          actor: ctx.actor,
          reason: `${ctx.reason} (reconcile finding ${f.id}: step ${step} succeeded, participant: ${record ?? 'never seen'})`,
        },
      );
      const auditId = await ctx.audit(
        tx,
        'reconcile.compensate_saga',
        f,
        { status: before.status, steps: before.steps, participant: record },
        { status: after.status, steps: after.steps },
      );
      return { outcome: 'repaired', action, detail: `${before.status} → ${after.status}`, auditId };
    } catch (error) {
      if (error instanceof ActionRefusedError) return { outcome: 'manual', detail: error.message };
      throw error;
    }
  });
}

export const sagaStepMismatch: ReconcileCheck = {
  name: 'saga-step-mismatch',
  description: "saga steps agree with their participants' records (succeeded = applied; undone = not applied)",
  unavailable: (ctx) =>
    ctx.participants.length === 0 ? 'no participant records registered (defineParticipantRecords)' : null,
  scan,
  healthy,
  repair,
};
