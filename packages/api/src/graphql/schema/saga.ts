import type { Sql } from '@postbox/engine';
import {
  listSagas,
  SAGA_STATUSES,
  readSagaDetail,
  sagaByBusinessKey,
  sagaHistory,
  type AttentionReason,
  type Direction,
  type SagaActionKind,
  type SagaFilter,
  type SagaHistoryRow,
  type SagaListRow,
  type SagaState,
  type SagaStatus,
  type StepStatus,
} from '@postbox/engine/saga';
import { sagaAllowedActions, sagaSteps, type SagaStepView } from '../../sagas/act.ts';
import { builder } from '../builder.ts';
import { upper } from '../enum-values.ts';
import { keysetPage } from '../connection.ts';
import { decodeCursor, invalid, MAX_PAGE, pageSize, requiredText, text, uuid } from '../validate.ts';

export const SagaStatusEnum = builder.enumType('SagaStatus', {
  values: upper<SagaStatus>()(SAGA_STATUSES),
});
const SagaDirectionEnum = builder.enumType('SagaDirection', {
  description: 'Which command of the step is out: the step itself, the question whether it applied, or its undoing',
  values: upper<Direction>()(['forward', 'query', 'compensate']),
});
const SagaStepStatusEnum = builder.enumType('SagaStepStatus', {
  values: upper<StepStatus>()(['pending', 'running', 'succeeded', 'failed', 'not_applied', 'compensated']),
});
const SagaAttentionReasonEnum = builder.enumType('SagaAttentionReason', {
  values: upper<AttentionReason>()([
    'compensation_refused',
    'query_unanswered',
    'budget_exhausted',
    'failed_after_pivot',
    'deadline_after_pivot',
    'definition_missing',
    'transition_failed',
  ]),
});
export const SagaActionEnum = builder.enumType('SagaAction', {
  description: 'An operator action on a saga; each moves it by the state machine’s own rules',
  values: upper<SagaActionKind>()(['retry', 'resolve', 'compensate', 'mark_compensated', 'resume', 'close']),
});

type SagaDetail = SagaState & { seq: number; createdAt: Date; updatedAt: Date };

/**
 * A saga as a resolver's parent: the listing's columns at once, its full state read (once) when a field needs it,
 * so a page of sagas costs one query unless it asks for more than the listing has.
 */
export interface SagaNode extends SagaListRow {
  state(): Promise<SagaDetail>;
}

export function sagaNode(sql: Sql, row: SagaListRow | SagaDetail): SagaNode {
  if ('steps' in row) {
    const detail = row;
    return {
      seq: detail.seq,
      sagaId: detail.id,
      type: detail.type,
      version: detail.definitionVersion,
      businessKey: detail.businessKey,
      status: detail.status,
      createdAt: detail.createdAt,
      updatedAt: detail.updatedAt,
      state: async () => detail,
    };
  }
  let loaded: Promise<SagaDetail> | undefined;
  return {
    ...row,
    state: () =>
      (loaded ??= readSagaDetail(sql, row.sagaId).then((d) => {
        if (!d) throw new Error(`saga ${row.sagaId} disappeared`);
        return d;
      })),
  };
}

/** The saga with this id, as a node, or null. */
export async function sagaById(sql: Sql, sagaId: string): Promise<SagaNode | null> {
  const detail = await readSagaDetail(sql, sagaId);
  return detail ? sagaNode(sql, detail) : null;
}

const SagaStepRef = builder.objectRef<SagaStepView>('SagaStep').implement({
  description: 'A step of a saga: its shape from the definition (null where the control plane loads none), its status',
  fields: (t) => ({
    index: t.exposeInt('index'),
    name: t.exposeString('name', { nullable: true }),
    status: t.field({ type: SagaStepStatusEnum, resolve: (s) => s.status }),
    pivot: t.exposeBoolean('pivot', { nullable: true, description: 'After it succeeded the saga is forward-only' }),
    compensable: t.exposeBoolean('compensable', { nullable: true, description: 'It has a compensation' }),
    sends: t.exposeInt('sends', { description: 'Commands sent to the step so far (forward, queries, compensations)' }),
  }),
});

const SagaHistoryLineRef = builder.objectRef<SagaHistoryRow>('SagaHistoryLine').implement({
  description: 'One transition of a saga: from where to where, why, and by whom (postbox or an operator)',
  fields: (t) => ({
    version: t.exposeInt('version', { description: 'The saga’s version the transition led to' }),
    from: t.field({ type: SagaStatusEnum, nullable: true, resolve: (h) => h.from as SagaStatus | null }),
    to: t.field({ type: SagaStatusEnum, resolve: (h) => h.to as SagaStatus }),
    step: t.exposeString('step', { nullable: true }),
    direction: t.field({ type: SagaDirectionEnum, nullable: true, resolve: (h) => h.direction as Direction | null }),
    cause: t.exposeString('cause'),
    actor: t.exposeString('actor'),
    at: t.field({ type: 'DateTime', resolve: (h) => h.at }),
  }),
});

export const SagaRef = builder.objectRef<SagaNode>('Saga').implement({
  description: 'A saga instance: where its flow stands, how it got there, and what an operator may do now',
  fields: (t) => ({
    id: t.exposeID('sagaId'),
    type: t.exposeString('type'),
    version: t.exposeInt('version', { description: 'The definition version the saga started with (and keeps)' }),
    businessKey: t.exposeString('businessKey'),
    status: t.field({ type: SagaStatusEnum, resolve: (s) => s.status }),
    attentionReason: t.field({
      type: SagaAttentionReasonEnum,
      nullable: true,
      description: 'Why the saga is frozen (needs_attention)',
      resolve: async (s) => (await s.state()).attentionReason,
    }),
    currentStep: t.field({
      type: SagaStepRef,
      description: 'The step whose command is out (or the last one moved)',
      resolve: async (s, _args, ctx) => {
        const state = await s.state();
        return sagaSteps(ctx.deps.sagas, state)[state.step]!;
      },
    }),
    direction: t.field({ type: SagaDirectionEnum, resolve: async (s) => (await s.state()).direction }),
    attempt: t.int({
      description: 'Sends of the current command so far',
      resolve: async (s) => (await s.state()).attempt,
    }),
    pivotPassed: t.boolean({ resolve: async (s) => (await s.state()).pivotPassed }),
    deadlineAt: t.field({ type: 'DateTime', nullable: true, resolve: async (s) => date((await s.state()).deadlineAt) }),
    dueAt: t.field({
      type: 'DateTime',
      nullable: true,
      description: 'When the command out counts as unanswered; null when nothing is out',
      resolve: async (s) => date((await s.state()).dueAt),
    }),
    createdAt: t.field({ type: 'DateTime', resolve: (s) => s.createdAt }),
    updatedAt: t.field({ type: 'DateTime', description: 'The last transition', resolve: (s) => s.updatedAt }),
    data: t.field({
      type: 'JSON',
      nullable: true,
      description: 'The saga’s business data (needs the payload scope)',
      authScopes: { payload: true },
      resolve: async (s) => (await s.state()).data,
    }),
    steps: t.field({
      type: [SagaStepRef],
      resolve: async (s, _args, ctx) => sagaSteps(ctx.deps.sagas, await s.state()),
    }),
    history: t.field({
      type: [SagaHistoryLineRef],
      description: 'Every transition, oldest first',
      resolve: (s, _args, ctx) => sagaHistory(ctx.deps.sql, s.sagaId),
    }),
    allowedActions: t.field({
      type: [SagaActionEnum],
      description:
        'What an operator may do now, by the state machine’s rules; empty when the saga has ended or the control plane loads no definition of its type and version',
      resolve: async (s, _args, ctx) => sagaAllowedActions(ctx.deps.sagas, await s.state()),
    }),
    definitionLoaded: t.boolean({
      description: 'Whether the control plane loads this saga’s definition (POSTBOX_SAGA_MODULES): actions need it',
      resolve: async (s, _args, ctx) => ctx.deps.sagas?.definitionOf(await s.state()) !== undefined,
    }),
  }),
});

const SagaFilterInput = builder.inputType('SagaFilter', {
  fields: (t) => ({
    type: t.string(),
    status: t.field({ type: SagaStatusEnum }),
    stuckForMs: t.int({ description: 'Unfinished sagas whose last transition is at least this old' }),
    deadlineBefore: t.field({ type: 'DateTime', description: 'Sagas whose deadline falls before this instant' }),
    version: t.int({ description: 'The definition version' }),
  }),
});

type SagaFilterArg =
  | {
      type?: string | null;
      status?: SagaStatus | null;
      stuckForMs?: number | null;
      deadlineBefore?: Date | null;
      version?: number | null;
    }
  | null
  | undefined;

function sagaFilter(f: SagaFilterArg): SagaFilter {
  const out: SagaFilter = {};
  const type = text('filter.type', f?.type);
  if (type !== undefined) out.type = type;
  if (f?.status) out.status = f.status;
  if (f?.stuckForMs != null) {
    if (!Number.isInteger(f.stuckForMs) || f.stuckForMs < 0)
      throw invalid('filter.stuckForMs', `must be an integer ≥ 0 (got ${f.stuckForMs})`);
    out.stuckForMs = f.stuckForMs;
  }
  if (f?.deadlineBefore) out.deadlineBefore = f.deadlineBefore;
  if (f?.version != null) {
    if (!Number.isInteger(f.version) || f.version < 1)
      throw invalid('filter.version', `must be an integer ≥ 1 (got ${f.version})`);
    out.version = f.version;
  }
  return out;
}

builder.queryField('saga', (t) =>
  t.field({
    type: SagaRef,
    nullable: true,
    description: 'One saga by id: its state, steps, history and the actions allowed now',
    authScopes: { viewer: true },
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, args, ctx) => sagaById(ctx.deps.sql, uuid('id', String(args.id), 'a saga id')),
  }),
);

builder.queryField('sagaByBusinessKey', (t) =>
  t.field({
    type: SagaRef,
    nullable: true,
    description: 'The saga of a type started for a business key (one per type and key)',
    authScopes: { viewer: true },
    args: { type: t.arg.string({ required: true }), businessKey: t.arg.string({ required: true }) },
    resolve: async (_root, args, ctx) => {
      const type = requiredText('type', args.type, 200);
      const key = requiredText('businessKey', args.businessKey, 500);
      const state = await sagaByBusinessKey(ctx.deps.sql, type, key);
      return state ? sagaById(ctx.deps.sql, state.id) : null;
    },
  }),
);

builder.queryField('sagas', (t) =>
  t.connection({
    type: SagaRef,
    description: `Sagas, newest first; pages of at most ${MAX_PAGE}, stable while new sagas start`,
    authScopes: { viewer: true },
    args: { filter: t.arg({ type: SagaFilterInput }) },
    resolve: async (_root, args, ctx) => {
      const size = pageSize(args);
      const after = decodeCursor('saga', args.after);
      const rows = await listSagas(ctx.deps.sql, sagaFilter(args.filter), size + 1, after);
      const page = keysetPage(rows, size, after, 'saga', (r) => r.seq);
      return { ...page, edges: page.edges.map((e) => ({ ...e, node: sagaNode(ctx.deps.sql, e.node) })) };
    },
  }),
);

function date(ms: number | null): Date | null {
  return ms === null ? null : new Date(ms);
}
