import {
  CHECK_NAMES,
  type CheckInfo,
  type CheckName,
  type FindingFilter,
  type FindingStatus,
  listFindings,
  listRuns,
  type ReconcileRunRow,
  readRun,
  type RunFilter,
  type RunMode,
  type RunStatus,
  type StoredFinding,
} from '@postbox/engine/reconcile';
import { builder } from '../builder.ts';
import { upper } from '../enum-values.ts';
import { keysetPage } from '../connection.ts';
import { decodeCursor, invalid, MAX_PAGE, pageSize, text } from '../validate.ts';

// Reconciliation, read side (docs/reconciliation.md): the checks, their runs and what they found. The engine
// writes all of it (Reconciler.run / repair / ignore); this only reads, keyset-paged.

export const ReconcileCheckEnum = builder.enumType('ReconcileCheck', {
  description: 'A reconciliation check: one invariant between the source of truth, the outbox, consumers and sagas',
  values: upper<CheckName>()(CHECK_NAMES),
});
export const FindingStatusEnum = builder.enumType('ReconciliationFindingStatus', {
  description:
    'open: a repair can act; manual: an operator decides; repaired / resolved (no longer observed) / ignored: closed',
  values: upper<FindingStatus>()(['open', 'manual', 'repaired', 'resolved', 'ignored']),
});
const RunModeEnum = builder.enumType('ReconciliationRunMode', {
  description: 'check: a run that finds; dry_run / execute: a repair pass over the findings',
  values: upper<RunMode>()(['check', 'dry_run', 'execute']),
});
const RunStatusEnum = builder.enumType('ReconciliationRunStatus', {
  description: 'stopped: the canary or the error ratio stopped a repair pass; skipped: the check’s lock was held',
  values: upper<RunStatus>()(['running', 'finished', 'stopped', 'failed', 'skipped']),
});

export const ReconciliationRunRef = builder.objectRef<ReconcileRunRow>('ReconciliationRun').implement({
  description: 'One run of a check, or one repair pass over its findings, with its counts',
  fields: (t) => ({
    id: t.exposeInt('runId'),
    check: t.field({ type: ReconcileCheckEnum, resolve: (r) => r.check as CheckName }),
    mode: t.field({ type: RunModeEnum, resolve: (r) => r.mode }),
    trigger: t.exposeString('trigger', { description: 'scheduled or on_demand' }),
    actor: t.exposeString('actor'),
    reason: t.exposeString('reason', { nullable: true }),
    status: t.field({ type: RunStatusEnum, resolve: (r) => r.status }),
    counts: t.field({
      type: 'JSON',
      description:
        'check: scanned, found, opened, reopened, closed; repair: planned, repaired, would_repair, stale, manual, failed (and stoppedBecause)',
      resolve: (r) => r.counts,
    }),
    error: t.exposeString('error', { nullable: true }),
    startedAt: t.field({ type: 'DateTime', resolve: (r) => r.startedAt }),
    finishedAt: t.field({ type: 'DateTime', nullable: true, resolve: (r) => r.finishedAt }),
  }),
});

export const FindingRef = builder.objectRef<StoredFinding>('ReconciliationFinding').implement({
  description: 'One broken invariant of one business key, as its check last observed it, and the last repair',
  fields: (t) => ({
    id: t.exposeInt('id'),
    check: t.field({ type: ReconcileCheckEnum, resolve: (f) => f.check as CheckName }),
    key: t.exposeString('key', { description: 'Stable within the check, e.g. demo-order:order-7@3' }),
    kind: t.exposeString('kind', { description: 'The case of the check, e.g. missing_row, never_delivered' }),
    status: t.field({ type: FindingStatusEnum, resolve: (f) => f.status }),
    expected: t.field({ type: 'JSON', description: 'What should hold', resolve: (f) => f.expected }),
    observed: t.field({ type: 'JSON', description: 'What was seen', resolve: (f) => f.observed }),
    repair: t.field({
      type: 'JSON',
      nullable: true,
      description: 'The last repair taken or refused: action, detail, actor, runId, auditId, error',
      resolve: (f) => f.repair,
    }),
    firstRunId: t.exposeInt('firstRunId'),
    lastRunId: t.exposeInt('lastRunId'),
    firstSeenAt: t.field({ type: 'DateTime', resolve: (f) => f.firstSeenAt }),
    lastSeenAt: t.field({ type: 'DateTime', resolve: (f) => f.lastSeenAt }),
    closedAt: t.field({ type: 'DateTime', nullable: true, resolve: (f) => f.closedAt }),
  }),
});

const CheckInfoRef = builder.objectRef<CheckInfo>('ReconciliationCheckInfo').implement({
  fields: (t) => ({
    check: t.field({ type: ReconcileCheckEnum, resolve: (c) => c.name }),
    description: t.exposeString('description'),
    graceMs: t.exposeInt('graceMs', { description: 'How long a state may last before it counts as broken' }),
    unavailable: t.exposeString('unavailable', {
      nullable: true,
      description: 'Why the check cannot run in this control plane (what to configure), or null',
    }),
  }),
});

export const FindingFilterInput = builder.inputType('ReconciliationFindingFilter', {
  fields: (t) => ({
    check: t.field({ type: ReconcileCheckEnum }),
    status: t.field({ type: FindingStatusEnum }),
    kind: t.string(),
    key: t.string({ description: 'The business key, exactly' }),
    keyPrefix: t.string({ description: 'Keys starting with this, e.g. demo-order:order-7@ (every version)' }),
    runId: t.int({ description: 'Findings the run opened, last observed or last repaired' }),
  }),
});

export type FindingFilterArg =
  | {
      check?: CheckName | null;
      status?: FindingStatus | null;
      kind?: string | null;
      key?: string | null;
      keyPrefix?: string | null;
      runId?: number | null;
    }
  | null
  | undefined;

/** A validated engine filter from the GraphQL input; hostile values are refused, not passed on. */
export function findingFilter(f: FindingFilterArg, path = 'filter'): FindingFilter {
  const out: FindingFilter = {};
  if (f?.check) out.check = f.check;
  if (f?.status) out.status = f.status;
  const kind = text(`${path}.kind`, f?.kind, 100);
  const key = text(`${path}.key`, f?.key, 500);
  const keyPrefix = text(`${path}.keyPrefix`, f?.keyPrefix, 500);
  if (kind !== undefined) out.kind = kind;
  if (key !== undefined) out.key = key;
  if (keyPrefix !== undefined) {
    if (keyPrefix.length === 0) throw invalid(`${path}.keyPrefix`, 'must not be empty');
    out.keyPrefix = keyPrefix;
  }
  if (f?.runId != null) out.runId = runId(`${path}.runId`, f.runId);
  return out;
}

export function runId(path: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) throw invalid(path, `must be a run id ≥ 1 (got ${value})`);
  return value;
}

const RunFilterInput = builder.inputType('ReconciliationRunFilter', {
  fields: (t) => ({
    check: t.field({ type: ReconcileCheckEnum }),
    mode: t.field({ type: RunModeEnum }),
    status: t.field({ type: RunStatusEnum }),
  }),
});

builder.queryField('reconciliationChecks', (t) =>
  t.field({
    type: [CheckInfoRef],
    description: 'Every check, its grace period and whether this control plane can run it',
    authScopes: { viewer: true },
    resolve: (_root, _args, ctx) => ctx.deps.reconciler.checks(),
  }),
);

builder.queryField('reconciliationRun', (t) =>
  t.field({
    type: ReconciliationRunRef,
    nullable: true,
    authScopes: { viewer: true },
    args: { id: t.arg.int({ required: true }) },
    resolve: async (_root, args, ctx) => (await readRun(ctx.deps.sql, runId('id', args.id))) ?? null,
  }),
);

builder.queryField('reconciliationRuns', (t) =>
  t.connection({
    type: ReconciliationRunRef,
    description: `Runs and repair passes, newest first; pages of at most ${MAX_PAGE}`,
    authScopes: { viewer: true },
    args: { filter: t.arg({ type: RunFilterInput }) },
    resolve: async (_root, args, ctx) => {
      const size = pageSize(args);
      const after = decodeCursor('reconciliation-run', args.after);
      const f = args.filter;
      const filter: RunFilter = {
        ...(f?.check ? { check: f.check } : {}),
        ...(f?.mode ? { mode: f.mode } : {}),
        ...(f?.status ? { status: f.status } : {}),
      };
      const rows = await listRuns(ctx.deps.sql, filter, size + 1, after);
      return keysetPage(rows, size, after, 'reconciliation-run', (r) => r.runId);
    },
  }),
);

builder.queryField('findings', (t) =>
  t.connection({
    type: FindingRef,
    description: `Reconciliation findings, oldest first (stable while runs add more); pages of at most ${MAX_PAGE}`,
    authScopes: { viewer: true },
    args: { filter: t.arg({ type: FindingFilterInput }) },
    resolve: async (_root, args, ctx) => {
      const size = pageSize(args);
      const after = decodeCursor('finding', args.after);
      const rows = await listFindings(ctx.deps.sql, findingFilter(args.filter), size + 1, after);
      return keysetPage(rows, size, after, 'finding', (r) => r.id);
    },
  }),
);
