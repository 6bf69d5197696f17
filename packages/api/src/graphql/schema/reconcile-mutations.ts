import { ActionRefusedError } from '@postbox/engine';
import { insertAudit } from '@postbox/engine/control';
import {
  type CheckName,
  type CheckRunReport,
  countFindings,
  type ItemOutcome,
  listFindings,
  readRun,
  type RepairItem,
  type RepairReport,
  type RepairRequest,
} from '@postbox/engine/reconcile';
import { GraphQLError } from 'graphql';
import { builder } from '../builder.ts';
import type { ApiContext } from '../context.ts';
import { invalid, requiredText, text } from '../validate.ts';
import { MUTATION_ERRORS } from './errors.ts';
import { audited } from './mutations.ts';
import {
  type FindingFilterArg,
  FindingFilterInput,
  FindingRef,
  findingFilter,
  ReconcileCheckEnum,
  ReconciliationRunRef,
} from './reconcile.ts';

// Reconciliation, act side (engine: Reconciler.run / repair / ignore). A run finds; a repair pass re-checks each
// finding and acts through Postbox's own commands, a dry run unless told otherwise, paced, stopped by a canary
// and an error ratio, every item audited by the engine. A request refused here — a bad argument, a state that
// does not allow it — is audited as refused too, with the caller and what was asked.

/** The most a single request may ask for: a repair pass over more is a job for `postbox reconcile`. */
export const REPAIR_LIMITS = { items: 1000, ids: 1000, ratePerSecond: 50, canary: 100 } as const;

const ItemOutcomeEnum = builder.enumType('ReconciliationRepairOutcome', {
  description:
    'repaired: the command ran; would_repair: a dry run; stale: no longer broken (closed); manual: for an operator; failed: the finding stays open',
  values: {
    REPAIRED: { value: 'repaired' },
    WOULD_REPAIR: { value: 'would_repair' },
    STALE: { value: 'stale' },
    MANUAL: { value: 'manual' },
    FAILED: { value: 'failed' },
  } as const satisfies Record<string, { value: ItemOutcome }>,
});

const RepairItemRef = builder.objectRef<RepairItem>('ReconciliationRepairItem').implement({
  fields: (t) => ({
    findingId: t.exposeInt('findingId'),
    key: t.exposeString('key'),
    kind: t.exposeString('kind'),
    outcome: t.field({ type: ItemOutcomeEnum, resolve: (i) => i.outcome }),
    action: t.exposeString('action', { nullable: true, description: 'The command run (or that a dry run would run)' }),
    detail: t.exposeString('detail'),
    startedAt: t.field({ type: 'DateTime', resolve: (i) => i.startedAt }),
    auditId: t.exposeInt('auditId', { nullable: true }),
  }),
});

const RepairCountsRef = builder.objectRef<RepairReport['counts']>('ReconciliationRepairCounts').implement({
  fields: (t) => ({
    planned: t.exposeInt('planned'),
    repaired: t.exposeInt('repaired'),
    wouldRepair: t.exposeInt('would_repair'),
    stale: t.exposeInt('stale'),
    manual: t.exposeInt('manual'),
    failed: t.exposeInt('failed'),
  }),
});

const RepairReportRef = builder.objectRef<RepairReport>('ReconciliationRepair').implement({
  description: 'A repair pass over a check’s open findings (its run is mode dry_run or execute)',
  fields: (t) => ({
    runId: t.exposeInt('runId'),
    check: t.field({ type: ReconcileCheckEnum, resolve: (r) => r.check as CheckName }),
    dryRun: t.exposeBoolean('dryRun'),
    status: t.exposeString('status', {
      description: 'finished, stopped (stoppedBecause), skipped (the check’s lock was held) or failed (error)',
    }),
    stoppedBecause: t.exposeString('stoppedBecause', {
      nullable: true,
      description: 'canary_failed or error_ratio',
    }),
    counts: t.field({ type: RepairCountsRef, resolve: (r) => r.counts }),
    items: t.field({ type: [RepairItemRef], resolve: (r) => r.items }),
    error: t.exposeString('error', { nullable: true }),
  }),
});

interface RunOutcome {
  check: CheckRunReport;
  repair: RepairReport | null;
}

const RunOutcomeRef = builder.objectRef<RunOutcome>('ReconciliationOutcome').implement({
  fields: (t) => ({
    run: t.field({
      type: ReconciliationRunRef,
      description: 'The check’s run (mode check): what it scanned and found',
      resolve: async (o, _args, ctx) => (await readRun(ctx.deps.sql, o.check.runId))!,
    }),
    repair: t.field({
      type: RepairReportRef,
      nullable: true,
      description:
        'The repair pass over the check’s open findings (none when there are none or the run did not finish)',
      resolve: (o) => o.repair,
    }),
  }),
});

const RepairPacingInput = builder.inputType('RepairPacing', {
  description: `How an executed repair pass goes: at most ratePerSecond repairs started a second (≤ ${REPAIR_LIMITS.ratePerSecond}), the first canary (≤ ${REPAIR_LIMITS.canary}) stop it on any failure, then it stops past maxErrorRatio failed`,
  fields: (t) => ({
    ratePerSecond: t.float({ defaultValue: 5 }),
    canary: t.int({ defaultValue: 5 }),
    maxErrorRatio: t.float({ defaultValue: 0.2 }),
  }),
});

type PacingArg = { ratePerSecond?: number | null; canary?: number | null; maxErrorRatio?: number | null } | null;

function pacing(p: PacingArg | undefined): Pick<RepairRequest, 'ratePerSecond' | 'stop'> {
  const rate = p?.ratePerSecond ?? 5;
  const canary = p?.canary ?? 5;
  const maxErrorRatio = p?.maxErrorRatio ?? 0.2;
  if (!Number.isFinite(rate) || rate <= 0 || rate > REPAIR_LIMITS.ratePerSecond)
    throw invalid('pacing.ratePerSecond', `must be > 0 and ≤ ${REPAIR_LIMITS.ratePerSecond} (got ${rate})`);
  if (!Number.isInteger(canary) || canary < 0 || canary > REPAIR_LIMITS.canary)
    throw invalid('pacing.canary', `must be 0…${REPAIR_LIMITS.canary} (got ${canary})`);
  if (!Number.isFinite(maxErrorRatio) || maxErrorRatio < 0 || maxErrorRatio > 1)
    throw invalid('pacing.maxErrorRatio', `must be from 0 to 1 (got ${maxErrorRatio})`);
  return { ratePerSecond: rate, stop: { canary, maxErrorRatio } };
}

function itemLimit(limit: number | null | undefined): number {
  const n = limit ?? 100;
  if (!Number.isInteger(n) || n < 1 || n > REPAIR_LIMITS.items)
    throw invalid('limit', `must be 1…${REPAIR_LIMITS.items} (got ${n})`);
  return n;
}

/**
 * Checks the arguments of a request; a bad one is audited as refused (who asked, for what, why refused) and goes
 * back as BAD_USER_INPUT. Then the action itself, whose refusals `audited` records.
 */
async function checked<A, T>(
  ctx: ApiContext,
  action: string,
  target: string,
  reason: string | null | undefined,
  validate: () => A,
  run: (args: A) => Promise<T>,
): Promise<T> {
  let args: A;
  try {
    args = validate();
  } catch (error) {
    if (error instanceof GraphQLError) {
      await insertAudit(ctx.deps.sql, {
        actor: ctx.caller.actor,
        action,
        reason: typeof reason === 'string' ? reason.slice(0, 500) : null,
        target,
        before: null,
        after: { code: error.extensions.code, argument: error.extensions.argument, message: error.message },
        outcome: 'refused',
      });
    }
    throw error;
  }
  return audited(ctx, action, target, typeof reason === 'string' ? reason.slice(0, 500) : null, () => run(args));
}

builder.mutationField('runReconciliation', (t) =>
  t.field({
    type: RunOutcomeRef,
    description:
      'Runs a check (findings recorded, one run of a check at a time), then a repair pass over what it left open: a dry run (the default) re-checks and changes nothing; dryRun: false repairs, paced, and needs a reason',
    authScopes: { operator: true },
    errors: { types: MUTATION_ERRORS },
    args: {
      check: t.arg({ type: ReconcileCheckEnum, required: true }),
      dryRun: t.arg.boolean({ defaultValue: true }),
      reason: t.arg.string({ description: 'Why (audited); required when dryRun is false' }),
      limit: t.arg.int({ defaultValue: 100, description: `Findings the repair pass takes (≤ ${REPAIR_LIMITS.items})` }),
      pacing: t.arg({ type: RepairPacingInput }),
    },
    resolve: (_root, args, ctx) => {
      const dryRun = args.dryRun ?? true;
      return checked(
        ctx,
        'reconcile.run',
        `reconcile:${args.check}`,
        args.reason,
        () => ({
          reason: dryRun
            ? (text('reason', args.reason, 500) ?? 'runReconciliation (dry run)')
            : requiredText('reason', args.reason ?? ''),
          limit: itemLimit(args.limit),
          pacing: pacing(args.pacing),
        }),
        async ({ reason, limit, pacing: p }) => {
          const actor = ctx.caller.actor;
          const check = await ctx.deps.reconciler.run(args.check, { actor });
          if (check.status !== 'finished' || check.counts.found === 0) return { check, repair: null };
          const open = (await countFindings(ctx.deps.sql, args.check)).some((c) => c.status === 'open');
          const repair = open
            ? await ctx.deps.reconciler.repair(args.check, { actor, reason, dryRun, limit, ...p })
            : null;
          return { check, repair };
        },
      );
    },
  }),
);

builder.mutationField('repairFindings', (t) =>
  t.field({
    type: RepairReportRef,
    description:
      'A repair pass over open findings of a check — these ids, or those a filter matches, or all (oldest first, up to limit). dryRun (the default) re-checks each and changes nothing',
    authScopes: { operator: true },
    errors: { types: MUTATION_ERRORS },
    args: {
      check: t.arg({ type: ReconcileCheckEnum, required: true }),
      ids: t.arg.intList({ description: `Finding ids (≤ ${REPAIR_LIMITS.ids}); not with filter` }),
      filter: t.arg({ type: FindingFilterInput, description: 'Open findings of the check matching it; not with ids' }),
      dryRun: t.arg.boolean({ defaultValue: true }),
      reason: t.arg.string({ required: true }),
      limit: t.arg.int({ defaultValue: 100, description: `At most this many (≤ ${REPAIR_LIMITS.items})` }),
      pacing: t.arg({ type: RepairPacingInput }),
    },
    resolve: (_root, args, ctx) =>
      checked(
        ctx,
        'reconcile.repair',
        `reconcile:${args.check}`,
        args.reason,
        () => ({
          reason: requiredText('reason', args.reason),
          limit: itemLimit(args.limit),
          pacing: pacing(args.pacing),
          ids: idsArg(args.ids, args.filter),
          filter: args.filter ? repairFilter(args.check, args.filter) : null,
        }),
        async ({ reason, limit, pacing: p, ids, filter }) => {
          let chosen = ids;
          if (filter) {
            const rows = await listFindings(ctx.deps.sql, filter, limit, null);
            if (rows.length === 0)
              throw new ActionRefusedError(
                'reconcile_nothing_to_repair',
                `no open ${args.check} finding matches the filter`,
              );
            chosen = rows.map((f) => f.id);
          }
          return ctx.deps.reconciler.repair(args.check, {
            actor: ctx.caller.actor,
            reason,
            dryRun: args.dryRun ?? true,
            limit,
            ...(chosen ? { ids: chosen } : {}),
            ...p,
          });
        },
      ),
  }),
);

function idsArg(ids: readonly number[] | null | undefined, filter: unknown): number[] | null {
  if (ids == null) return null;
  if (filter != null) throw invalid('ids', 'give finding ids or a filter, not both');
  if (ids.length === 0 || ids.length > REPAIR_LIMITS.ids)
    throw invalid('ids', `must be 1…${REPAIR_LIMITS.ids} finding ids (got ${ids.length})`);
  if (ids.some((id) => !Number.isInteger(id) || id < 1)) throw invalid('ids', 'must be finding ids ≥ 1');
  return [...new Set(ids)];
}

/** Repairs act on a check's open findings: a filter naming another check or status is a mistake, said so. */
function repairFilter(check: CheckName, f: NonNullable<FindingFilterArg>) {
  const filter = findingFilter(f);
  if (filter.check && filter.check !== check)
    throw invalid('filter.check', `must be the check repaired (${check}) or left out`);
  if (filter.status && filter.status !== 'open')
    throw invalid('filter.status', 'repairs act on open findings only: leave it out or give OPEN');
  return { ...filter, check, status: 'open' as const };
}

builder.mutationField('ignoreFinding', (t) =>
  t.field({
    type: FindingRef,
    description:
      'Closes a finding as accepted: it stays ignored when its check sees it again (admin: it silences the check for this key)',
    authScopes: { admin: true },
    errors: { types: MUTATION_ERRORS },
    args: { id: t.arg.int({ required: true }), reason: t.arg.string({ required: true }) },
    resolve: (_root, args, ctx) =>
      checked(
        ctx,
        'reconcile.ignore',
        `reconcile:finding:${args.id}`,
        args.reason,
        () => {
          if (!Number.isInteger(args.id) || args.id < 1)
            throw invalid('id', `must be a finding id ≥ 1 (got ${args.id})`);
          return { reason: requiredText('reason', args.reason) };
        },
        ({ reason }) => ctx.deps.reconciler.ignore(args.id, { actor: ctx.caller.actor, reason }),
      ),
  }),
);
