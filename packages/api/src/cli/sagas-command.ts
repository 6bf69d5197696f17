import { ActionRefusedError, NotFoundError, type Sql } from '@postbox/engine';
import { insertAudit } from '@postbox/engine/control';
import {
  listSagas,
  SAGA_STATUSES,
  readSagaDetail,
  sagaByBusinessKey,
  sagaHistory,
  type SagaAction,
  type SagaFilter,
  type SagaOrchestrator,
  type SagaState,
  type SagaStatus,
} from '@postbox/engine/saga';
import { parseSagaModules } from '../config/api.ts';
import { actOnSaga, sagaAllowedActions, sagaSteps } from '../sagas/act.ts';
import { loadSagaOrchestrator, registerSagaDefinitions } from '../sagas/modules.ts';
import {
  instantOption,
  integerOption,
  jsonOption,
  operatorActor,
  operatorCommand,
  operatorUrl,
  type OptionValues,
  printJson,
  printTable,
  UsageError,
  withDatabase,
} from './operator-command.ts';

const HELP = `postbox sagas — find, inspect and act on sagas

  postbox sagas list  [--status S] [--type T] [--version N] [--stuck-for MS] [--deadline-before ISO]
                      [--limit N] [--before SEQ] [--json]          (newest first)
  postbox sagas show  ID | --business-key KEY --type TYPE [--json]  (state, steps, history, allowed actions)
  postbox sagas retry            ID --reason TEXT   one more attempt of the command out (a forward one is asked about)
  postbox sagas resume           ID --reason TEXT   automation back on for a frozen saga
  postbox sagas compensate       ID --reason TEXT   undo what succeeded, last first (never after the pivot)
  postbox sagas close            ID --reason TEXT   end it as closed_manually: nothing more sent, nothing undone
  postbox sagas resolve          ID --outcome applied|not_applied --evidence TEXT --reason TEXT [--data JSON]
  postbox sagas mark-compensated ID --step NAME --reason TEXT     (its compensation was done by hand)

--status: running, resolving, compensating, completed, compensated, needs_attention, closed_manually.
Actions follow the saga's state machine and are refused (exit 1, the reason on stderr) when its state does not
allow them; \`show\` lists what is allowed. They build commands from the saga's definition: POSTBOX_SAGA_MODULES
names the modules exporting \`sagas\` (arrays of defineSaga results). Each action, and each refusal, is written
to the audit log with --actor (default: POSTBOX_ACTOR, else the OS user) and --reason.
Exit codes: 0 done, 1 refused or not found, 2 usage error.`;

const STATUSES: readonly SagaStatus[] = SAGA_STATUSES;
const ACTIONS = ['retry', 'resume', 'compensate', 'close', 'resolve', 'mark-compensated'] as const;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const OPTIONS = {
  status: { type: 'string' },
  type: { type: 'string' },
  version: { type: 'string' },
  'stuck-for': { type: 'string' },
  'deadline-before': { type: 'string' },
  limit: { type: 'string' },
  before: { type: 'string' },
  'business-key': { type: 'string' },
  reason: { type: 'string' },
  outcome: { type: 'string' },
  evidence: { type: 'string' },
  data: { type: 'string' },
  step: { type: 'string' },
  actor: { type: 'string' },
  json: { type: 'boolean' },
} as const;

type Values = OptionValues<typeof OPTIONS>;

export const sagasCommand = operatorCommand({
  name: 'sagas',
  help: HELP,
  options: OPTIONS,
  verb: 'required',
  usageErrors: 'report',
  verbInUsageErrors: true,
  run: async ({ values, verb, rest }) =>
    withDatabase({ command: 'sagas', url: await operatorUrl(), max: 2 }, async (sql) => {
      if (verb === 'list') return await list(sql, values);
      if (verb === 'show') return await show(sql, rest[0], values);
      if (verb !== undefined && isAction(verb)) return await act(sql, verb, rest[0], values);
      throw new UsageError(`unknown verb "${verb}"`);
    }),
});

async function list(sql: Sql, v: Values): Promise<number> {
  const filter: SagaFilter = {};
  if (typeof v.status === 'string') filter.status = status(v.status);
  if (typeof v.type === 'string') filter.type = v.type;
  if (typeof v.version === 'string') filter.version = integerOption(v.version, 'version');
  if (typeof v['stuck-for'] === 'string') filter.stuckForMs = integerOption(v['stuck-for'], 'stuck-for');
  if (typeof v['deadline-before'] === 'string')
    filter.deadlineBefore = instantOption(v['deadline-before'], 'deadline-before');
  const limit = integerOption(v.limit, 'limit', { fallback: 50, max: 500 });
  const before = typeof v.before === 'string' ? integerOption(v.before, 'before') : null;
  const rows = await listSagas(sql, filter, limit, before);
  if (v.json) {
    printJson(rows);
    return 0;
  }
  printTable(
    rows.map((r) => ({
      seq: r.seq,
      id: r.sagaId,
      type: `${r.type} v${r.version}`,
      business_key: r.businessKey,
      status: r.status,
      updated: r.updatedAt.toISOString(),
    })),
  );
  if (rows.length === limit) console.log(`next page: --before ${rows.at(-1)!.seq}`);
  return 0;
}

async function show(sql: Sql, id: string | undefined, v: Values): Promise<number> {
  let sagaId = id;
  if (sagaId === undefined) {
    if (typeof v['business-key'] !== 'string' || typeof v.type !== 'string')
      throw new UsageError('name the saga: ID, or --business-key KEY --type TYPE');
    const found = await sagaByBusinessKey(sql, v.type, v['business-key']);
    if (!found) {
      console.error(`no saga of type ${v.type} with business key ${v['business-key']}`);
      return 1;
    }
    sagaId = found.id;
  }
  const detail = await readSagaDetail(sql, uuid(sagaId));
  if (!detail) {
    console.error(`no saga ${sagaId}`);
    return 1;
  }
  const sagas = await orchestrator(sql);
  const steps = sagaSteps(sagas, detail);
  const history = await sagaHistory(sql, detail.id);
  const allowed = sagaAllowedActions(sagas, detail);
  const definitionLoaded = sagas?.definitionOf(detail) !== undefined;
  if (v.json) {
    const { sends: _sends, steps: _steps, ...state } = detail;
    printJson({
      ...state,
      dueAt: iso(detail.dueAt),
      deadlineAt: iso(detail.deadlineAt),
      steps,
      history,
      allowedActions: allowed,
      definitionLoaded,
    });
    return 0;
  }
  const current = steps[detail.step]!;
  console.log(
    [
      `saga      ${detail.id}  (${detail.type} v${detail.definitionVersion}, business key ${detail.businessKey})`,
      `status    ${detail.status}${detail.attentionReason ? ` (${detail.attentionReason})` : ''}`,
      `step      ${current.name ?? `#${current.index}`}, ${detail.direction} attempt ${detail.attempt}${detail.pivotPassed ? ', past the pivot' : ''}`,
      `due       ${iso(detail.dueAt) ?? '-'}   deadline ${iso(detail.deadlineAt) ?? '-'}`,
      `created   ${detail.createdAt.toISOString()}   last transition ${detail.updatedAt.toISOString()}`,
      `data      ${JSON.stringify(detail.data)}`,
      '',
    ].join('\n'),
  );
  printTable(
    steps.map((s) => ({
      '#': s.index,
      step: s.name ?? '?',
      status: s.status,
      pivot: s.pivot === null ? '?' : s.pivot ? 'pivot' : '',
      compensable: s.compensable === null ? '?' : s.compensable ? 'yes' : 'no',
      sends: s.sends,
    })),
  );
  console.log('');
  printTable(
    history.map((h) => ({
      v: h.version,
      at: h.at.toISOString(),
      transition: `${h.from ?? '-'} → ${h.to}`,
      step: `${h.step ?? '-'}${h.direction ? ` (${h.direction})` : ''}`,
      actor: h.actor,
      cause: h.cause,
    })),
  );
  console.log(
    `\nallowed actions: ${
      definitionLoaded
        ? allowed.join(', ') || 'none'
        : `none here (this process loads no definition of ${detail.type} v${detail.definitionVersion}: POSTBOX_SAGA_MODULES)`
    }`,
  );
  return 0;
}

async function act(sql: Sql, verb: (typeof ACTIONS)[number], id: string | undefined, v: Values): Promise<number> {
  if (id === undefined) throw new UsageError('name the saga by its ID');
  const sagaId = uuid(id);
  let reason = required(v, 'reason');
  const action = actionOf(verb, v);
  if (verb === 'resolve') reason = `${reason} (evidence: ${required(v, 'evidence')})`;
  const actor = operatorActor(v.actor);
  const sagas = await orchestrator(sql);
  try {
    const { before, after } = await actOnSaga(sql, sagas, sagaId, action, { actor, reason });
    if (v.json) printJson({ sagaId, action: action.kind, actor, before: brief(before), after: brief(after) });
    else
      console.log(
        `saga ${sagaId}: ${action.kind}: ${before.status} → ${after.status}${after.attentionReason ? ` (${after.attentionReason})` : ''}, step ${after.step} ${after.direction}; audited as ${actor}`,
      );
    return 0;
  } catch (error) {
    if (!(error instanceof ActionRefusedError || error instanceof NotFoundError)) throw error;
    await insertAudit(sql, {
      actor,
      action: `saga.${action.kind}`,
      reason,
      target: sagaId,
      before: null,
      after: { code: error.code, message: error.message },
      outcome: 'refused',
    });
    console.error(`postbox sagas ${verb}: ${error.message} [${error.code}]`);
    return 1;
  }
}

function isAction(verb: string): verb is (typeof ACTIONS)[number] {
  return (ACTIONS as readonly string[]).includes(verb);
}

function actionOf(verb: (typeof ACTIONS)[number], v: Values): SagaAction {
  switch (verb) {
    case 'resolve': {
      const outcome = required(v, 'outcome').toLowerCase().replace('-', '_');
      if (outcome !== 'applied' && outcome !== 'not_applied')
        throw new UsageError(`--outcome must be applied or not_applied, got "${String(v.outcome)}"`);
      if (typeof v.data === 'string' && outcome !== 'applied')
        throw new UsageError('--data goes with --outcome applied');
      return outcome === 'applied'
        ? { kind: 'resolve', outcome, ...(typeof v.data === 'string' ? { data: jsonOption(v.data, 'data') } : {}) }
        : { kind: 'resolve', outcome };
    }
    case 'mark-compensated':
      return { kind: 'mark_compensated', step: required(v, 'step') };
    default:
      return { kind: verb };
  }
}

/** The definitions actions are built from (POSTBOX_SAGA_MODULES), checked like any process that moves sagas. */
async function orchestrator(sql: Sql): Promise<SagaOrchestrator | undefined> {
  const sagas = await loadSagaOrchestrator(parseSagaModules(process.env.POSTBOX_SAGA_MODULES ?? ''));
  if (sagas) await registerSagaDefinitions(sql, sagas);
  return sagas;
}

function brief(s: SagaState) {
  return {
    status: s.status,
    step: s.step,
    direction: s.direction,
    attempt: s.attempt,
    attentionReason: s.attentionReason,
    version: s.version,
    steps: s.steps,
  };
}

function required(v: Values, name: keyof Values): string {
  const value = v[name];
  if (typeof value !== 'string' || value.trim() === '')
    throw new UsageError(`--${name} is required${name === 'reason' ? ' (it goes to the audit log)' : ''}`);
  return value;
}

function status(value: string): SagaStatus {
  if (!(STATUSES as readonly string[]).includes(value))
    throw new UsageError(`--status must be one of ${STATUSES.join(', ')}, got "${value}"`);
  return value as SagaStatus;
}

function uuid(value: string): string {
  if (!UUID.test(value)) throw new UsageError(`the saga ID must be a UUID, got "${value}"`);
  return value.toLowerCase();
}

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}
