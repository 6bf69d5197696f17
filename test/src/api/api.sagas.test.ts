import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readSaga, REPLY, SagaOrchestrator, type SagaState } from '@postbox/engine/saga';
import { startTestApi, type TestApi } from '../support/api.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { opsOrder } from '../saga/fixtures/operator-sagas.ts';

// Sagas through the control plane over real HTTP: sagas driven into the states an operator meets (completed,
// compensated, refused compensation, past the pivot, resolving, unanswered query) by the orchestrator's own reply
// and timer handlers — no broker — then read and acted on through GraphQL. What is checked is the database:
// saga rows, history lines, outbox commands, audit records.

let db: TestDatabase;
let api: TestApi;
let bare: TestApi; // a control plane that loads no saga definition
const sagas = new SagaOrchestrator([opsOrder]);
type Case =
  | 'completed'
  | 'compensated-1'
  | 'compensated-2'
  | 'compensated-3'
  | 'refused'
  | 'pastPivot'
  | 'resolving'
  | 'unanswered'
  | 'toClose';
const ids = {} as Record<Case, string>;

async function start(key: string): Promise<string> {
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, opsOrder, { businessKey: key, data: { orderId: key } }),
  );
  return sagaId;
}

/** The participant's reply to the command out now. */
async function reply(sagaId: string, type: string, data: unknown = {}): Promise<void> {
  const s = (await readSaga(db.sql, sagaId))!;
  const verdict = await db.sql.begin((tx) =>
    sagas.onReply(tx, {
      eventId: randomUUID(),
      sagaId,
      step: opsOrder.steps[s.step]!.name,
      direction: s.direction,
      attempt: s.attempt,
      type,
      data,
    }),
  );
  assert.equal(verdict, 'applied', `${type} applies to ${s.status} ${s.direction} ${s.step}`);
}

/** The command out counts as unanswered (what the timer runner does at due_at). */
async function timeout(sagaId: string): Promise<void> {
  const s = (await readSaga(db.sql, sagaId))!;
  assert.equal(await db.sql.begin((tx) => sagas.onTimer(tx, sagaId, s.version, s.dueAt! + 1)), 'applied');
}

async function commands(sagaId: string) {
  return db.sql<{ event_type: string; aggregate_id: string; direction: string }[]>`
    SELECT event_type, aggregate_id, extensions->>'sagadirection' AS direction FROM message_outbox
    WHERE aggregate_id LIKE ${`saga:${sagaId}:%`} ORDER BY created_at, aggregate_version`;
}

async function lastHistory(sagaId: string) {
  const [h] = await db.sql<{ actor: string; cause: string; from_status: string; to_status: string }[]>`
    SELECT actor, cause, from_status, to_status FROM saga_history WHERE saga_id = ${sagaId} ORDER BY id DESC LIMIT 1`;
  return h!;
}

async function audits(sagaId: string) {
  return db.sql<{ actor: string; action: string; outcome: string; reason: string; before: any; after: any }[]>`
    SELECT actor, action, outcome, reason, before, after FROM operator_audit WHERE target = ${sagaId} ORDER BY audit_id`;
}

before(async () => {
  db = await freshDatabase();
  api = await startTestApi(db.url, { sagas });
  bare = await startTestApi(db.url);

  ids.completed = await start('completed');
  for (const t of ['inventory.reserved', 'payments.charged', 'shipping.shipped', 'notify.sent'])
    await reply(ids.completed, t, { id: 'r-completed' });

  for (const key of ['compensated-1', 'compensated-2', 'compensated-3'] as const) {
    ids[key] = await start(key);
    await reply(ids[key], 'inventory.reserved', { id: `r-${key}` });
    await reply(ids[key], 'payments.declined');
    await reply(ids[key], REPLY.compensated);
  }

  // Shipping refused (before the pivot): the charge is refunded first — and the payments service refuses that.
  ids.refused = await start('refused');
  await reply(ids.refused, 'inventory.reserved', { id: 'r-refused' });
  await reply(ids.refused, 'payments.charged');
  await reply(ids.refused, 'shipping.refused');
  await reply(ids.refused, REPLY.compensationRefused);

  ids.pastPivot = await start('past-pivot');
  await reply(ids.pastPivot, 'inventory.reserved', { id: 'r-past' });
  await reply(ids.pastPivot, 'payments.charged');
  await reply(ids.pastPivot, 'shipping.shipped');

  ids.resolving = await start('resolving');
  await timeout(ids.resolving); // the reserve command unanswered: the saga asks

  ids.unanswered = await start('unanswered');
  await timeout(ids.unanswered);
  await timeout(ids.unanswered); // its one query unanswered too: needs attention

  ids.toClose = await start('to-close');
});

after(async () => {
  await bare?.close();
  await api?.close();
  await db?.drop();
});

const SAGA = `query ($id: ID!) { saga(id: $id) {
  id type version businessKey status attentionReason direction attempt pivotPassed deadlineAt dueAt createdAt updatedAt
  data definitionLoaded allowedActions
  currentStep { name index status }
  steps { name index status pivot compensable sends }
  history { version from to step direction cause actor at } } }`;

test('saga(id): state, steps from the definition, history and the actions allowed now, as the engine has them', async () => {
  const r = await api.gql(SAGA, { id: ids.refused });
  assert.equal(r.errors, undefined, JSON.stringify(r.errors));
  const s = r.data.saga;
  const row = (await readSaga(db.sql, ids.refused))!;
  assert.deepEqual(
    {
      id: s.id,
      type: s.type,
      version: s.version,
      businessKey: s.businessKey,
      status: s.status,
      attentionReason: s.attentionReason,
      direction: s.direction,
      attempt: s.attempt,
      pivotPassed: s.pivotPassed,
      dueAt: s.dueAt,
      data: s.data,
      definitionLoaded: s.definitionLoaded,
      currentStep: s.currentStep,
    },
    {
      id: ids.refused,
      type: 'ops-order',
      version: 1,
      businessKey: 'refused',
      status: 'NEEDS_ATTENTION',
      attentionReason: 'COMPENSATION_REFUSED',
      direction: 'COMPENSATE',
      attempt: 1,
      pivotPassed: false,
      dueAt: null,
      data: row.data,
      definitionLoaded: true,
      currentStep: { name: 'charge', index: 1, status: row.steps[1]!.toUpperCase() },
    },
  );
  assert.deepEqual(s.steps, [
    { name: 'reserve', index: 0, status: 'SUCCEEDED', pivot: false, compensable: true, sends: 1 },
    { name: 'charge', index: 1, status: row.steps[1]!.toUpperCase(), pivot: false, compensable: true, sends: 2 },
    { name: 'ship', index: 2, status: 'FAILED', pivot: true, compensable: false, sends: 1 },
    { name: 'notify', index: 3, status: 'PENDING', pivot: false, compensable: false, sends: 0 },
  ]);
  assert.deepEqual(s.allowedActions, ['RETRY', 'MARK_COMPENSATED', 'RESUME', 'CLOSE']);
  assert.deepEqual(
    s.history.map((h: any) => `${h.version} ${h.from ?? '-'}→${h.to} ${h.step} ${h.direction} ${h.actor}`),
    [
      '1 -→RUNNING reserve FORWARD postbox',
      '2 RUNNING→RUNNING reserve FORWARD postbox',
      '3 RUNNING→RUNNING charge FORWARD postbox',
      '4 RUNNING→COMPENSATING charge COMPENSATE postbox',
      '5 COMPENSATING→NEEDS_ATTENTION charge COMPENSATE postbox',
    ],
  );

  const others = await Promise.all(
    [ids.completed, ids.pastPivot, ids.resolving, ids.toClose].map(
      async (id) => (await api.gql('query ($id: ID!) { saga(id: $id) { status allowedActions } }', { id })).data.saga,
    ),
  );
  assert.deepEqual(others, [
    { status: 'COMPLETED', allowedActions: [] },
    { status: 'RUNNING', allowedActions: ['RETRY', 'RESOLVE', 'CLOSE'] },
    { status: 'RESOLVING', allowedActions: ['RETRY', 'RESOLVE', 'COMPENSATE', 'CLOSE'] },
    { status: 'RUNNING', allowedActions: ['RETRY', 'RESOLVE', 'COMPENSATE', 'CLOSE'] },
  ]);

  const viewer = await api.gql(
    'query ($id: ID!) { saga(id: $id) { status data } }',
    { id: ids.refused },
    api.tokens.viewer,
  );
  assert.equal(viewer.data.saga.status, 'NEEDS_ATTENTION');
  assert.equal(viewer.data.saga.data, null, 'the business data needs the payload scope');
  assert.equal(viewer.errors?.[0]?.extensions?.code, 'FORBIDDEN');

  assert.equal((await api.gql(SAGA, { id: randomUUID() })).data.saga, null);
  const bad = await api.gql(SAGA, { id: 'nope' });
  assert.equal(bad.errors?.[0]?.extensions?.code, 'BAD_USER_INPUT');
});

test('sagaByBusinessKey, and sagas filtered by status paged with a cursor, newest first', async () => {
  const byKey = await api.gql(
    '{ sagaByBusinessKey(type: "ops-order", businessKey: "past-pivot") { id status pivotPassed currentStep { name } } }',
    {},
    api.tokens.viewer,
  );
  assert.deepEqual(byKey.data.sagaByBusinessKey, {
    id: ids.pastPivot,
    status: 'RUNNING',
    pivotPassed: true,
    currentStep: { name: 'notify' },
  });
  const none = await api.gql('{ sagaByBusinessKey(type: "ops-order", businessKey: "nobody") { id } }');
  assert.equal(none.data.sagaByBusinessKey, null);

  const PAGE = `query ($after: String) { sagas(first: 2, after: $after, filter: { status: COMPENSATED, type: "ops-order" }) {
    edges { cursor node { id businessKey status steps { status } } } pageInfo { hasNextPage endCursor } } }`;
  const first = (await api.gql(PAGE, {}, api.tokens.viewer)).data.sagas;
  assert.equal(first.pageInfo.hasNextPage, true);
  const second = (await api.gql(PAGE, { after: first.pageInfo.endCursor }, api.tokens.viewer)).data.sagas;
  assert.equal(second.pageInfo.hasNextPage, false);
  const nodes = [...first.edges, ...second.edges].map((e: any) => e.node);
  assert.deepEqual(
    nodes.map((n: any) => n.businessKey),
    ['compensated-3', 'compensated-2', 'compensated-1'],
  );
  for (const n of nodes) {
    assert.equal(n.status, 'COMPENSATED');
    assert.deepEqual(
      n.steps.map((s: any) => s.status),
      ['COMPENSATED', 'FAILED', 'PENDING', 'PENDING'],
    );
  }
  const others = await api.gql('{ sagas(filter: { status: RUNNING, version: 1 }) { edges { node { id } } } }');
  assert.deepEqual(others.data.sagas.edges.map((e: any) => e.node.id).sort(), [ids.pastPivot, ids.toClose].sort());
  const bad = await api.gql('{ sagas(after: "bm9wZQ") { edges { cursor } } }');
  assert.equal(bad.errors?.[0]?.extensions?.code, 'BAD_USER_INPUT');
});

test('backlog: saga counts by status as in the database, the oldest stuck saga and the oldest running', async () => {
  const r = await api.gql(
    `{ backlog { sagas { running resolving compensating completed compensated needsAttention closedManually
        oldestStuck { sagaId type status since } oldestRunningSince } } }`,
    {},
    api.tokens.viewer,
  );
  assert.equal(r.errors, undefined, JSON.stringify(r.errors));
  const counts = r.data.backlog.sagas;
  const byStatus = Object.fromEntries(
    (
      await db.sql<{ status: string; n: number }[]>`SELECT status, count(*)::int AS n FROM saga_instance GROUP BY 1`
    ).map((x) => [x.status, x.n]),
  );
  assert.deepEqual(
    {
      running: counts.running,
      resolving: counts.resolving,
      compensating: counts.compensating,
      completed: counts.completed,
      compensated: counts.compensated,
      needsAttention: counts.needsAttention,
      closedManually: counts.closedManually,
    },
    {
      running: byStatus.running ?? 0,
      resolving: byStatus.resolving ?? 0,
      compensating: byStatus.compensating ?? 0,
      completed: byStatus.completed ?? 0,
      compensated: byStatus.compensated ?? 0,
      needsAttention: byStatus.needs_attention ?? 0,
      closedManually: byStatus.closed_manually ?? 0,
    },
  );
  assert.deepEqual([counts.completed, counts.compensated, counts.needsAttention, counts.running], [1, 3, 2, 2]);
  const [oldest] = await db.sql<{ saga_id: string; updated_at: Date }[]>`
    SELECT saga_id, updated_at FROM saga_instance WHERE status IN ('running', 'resolving', 'compensating', 'needs_attention')
    ORDER BY updated_at LIMIT 1`;
  assert.deepEqual(counts.oldestStuck, {
    sagaId: ids.refused,
    type: 'ops-order',
    status: 'NEEDS_ATTENTION',
    since: oldest!.updated_at.toISOString(),
  });
  assert.equal(oldest!.saga_id, ids.refused);
  const [running] = await db.sql<
    { created_at: Date }[]
  >`SELECT created_at FROM saga_instance WHERE saga_id = ${ids.pastPivot}`;
  assert.equal(counts.oldestRunningSince, running!.created_at.toISOString());
});

const MARK = `mutation ($id: ID!, $step: String!, $reason: String!) {
  markStepCompensated(sagaId: $id, step: $step, reason: $reason) {
    __typename
    ... on MutationMarkStepCompensatedSuccess { data { status direction attentionReason currentStep { name }
        steps { name status } allowedActions history { actor cause } } }
    ... on Error { code message } } }`;

test('markStepCompensated on a refused compensation: compensation goes on with the next step, under the caller, audited', async () => {
  const id = ids.refused;
  const wrong = (await api.gql(MARK, { id, step: 'reserve', reason: 'wrong step' }, api.tokens.operator)).data
    .markStepCompensated;
  assert.equal(wrong.__typename, 'ActionRefusedError');
  assert.match(wrong.message, /step reserve is not the one being compensated \(charge\)/);

  const r = await api.gql(MARK, { id, step: 'charge', reason: 'refunded by hand in the PSP' }, api.tokens.operator);
  assert.equal(r.errors, undefined, JSON.stringify(r.errors));
  const s = r.data.markStepCompensated;
  assert.equal(s.__typename, 'MutationMarkStepCompensatedSuccess', JSON.stringify(s));
  assert.deepEqual(
    {
      status: s.data.status,
      direction: s.data.direction,
      attentionReason: s.data.attentionReason,
      current: s.data.currentStep.name,
    },
    { status: 'COMPENSATING', direction: 'COMPENSATE', attentionReason: null, current: 'reserve' },
  );
  assert.deepEqual(
    s.data.steps.map((x: any) => `${x.name}:${x.status}`),
    ['reserve:SUCCEEDED', 'charge:COMPENSATED', 'ship:FAILED', 'notify:PENDING'],
  );
  assert.deepEqual(s.data.allowedActions, ['RETRY', 'CLOSE']);

  const sent = await commands(id);
  assert.deepEqual(sent.at(-1), {
    event_type: 'inventory.release',
    aggregate_id: `saga:${id}:reserve`,
    direction: 'compensate',
  });
  const h = await lastHistory(id);
  assert.equal(h.actor, 'test-operator');
  assert.match(h.cause, /mark_compensated by test-operator: refunded by hand in the PSP/);
  assert.deepEqual([h.from_status, h.to_status], ['needs_attention', 'compensating']);

  const rows = await audits(id);
  assert.deepEqual(
    rows.map((a) => `${a.action} ${a.outcome} ${a.actor}`),
    ['saga.mark_compensated refused test-operator', 'saga.mark_compensated ok test-operator'],
  );
  const ok = rows[1]!;
  assert.equal(ok.reason, 'refunded by hand in the PSP');
  assert.equal(ok.before.status, 'needs_attention');
  assert.equal(ok.before.attentionReason, 'compensation_refused');
  assert.equal(ok.after.status, 'compensating');
  assert.deepEqual(ok.after.steps, ['succeeded', 'compensated', 'failed', 'pending']);
});

test('compensateSaga past the pivot is refused (typed error), audited as refused, and changes nothing', async () => {
  const id = ids.pastPivot;
  const before: SagaState = (await readSaga(db.sql, id))!;
  const sentBefore = await commands(id);
  const r = await api.gql(
    `mutation ($id: ID!) { compensateSaga(sagaId: $id, reason: "customer cancelled") {
      __typename ... on Error { code message } ... on MutationCompensateSagaSuccess { data { status } } } }`,
    { id },
    api.tokens.operator,
  );
  assert.equal(r.errors, undefined, JSON.stringify(r.errors));
  assert.equal(r.data.compensateSaga.__typename, 'ActionRefusedError');
  assert.equal(r.data.compensateSaga.code, 'saga_action_refused');
  assert.match(r.data.compensateSaga.message, /past its pivot and forward-only/);
  assert.deepEqual(await readSaga(db.sql, id), before, 'the saga did not move');
  assert.deepEqual(await commands(id), sentBefore, 'nothing sent');
  const [a] = await audits(id);
  assert.deepEqual(
    { action: a!.action, outcome: a!.outcome, actor: a!.actor, reason: a!.reason, code: a!.after.code },
    {
      action: 'saga.compensate',
      outcome: 'refused',
      actor: 'test-operator',
      reason: 'customer cancelled',
      code: 'saga_action_refused',
    },
  );

  const blank = await api.gql(`mutation ($id: ID!) { compensateSaga(sagaId: $id, reason: "  ") { __typename } }`, {
    id,
  });
  assert.equal(blank.errors?.[0]?.extensions?.code, 'BAD_USER_INPUT', 'a reason is required');
});

const RESOLVE = `mutation ($id: ID!, $outcome: SagaStepOutcome!, $data: JSON) {
  resolveSagaStep(sagaId: $id, outcome: $outcome, evidence: "warehouse system shows the reservation", data: $data,
                  reason: "checked by hand") {
    __typename ... on Error { code message }
    ... on MutationResolveSagaStepSuccess { data { status direction currentStep { name } data steps { status } } } } }`;

test('resolveSagaStep: APPLIED on a resolving saga goes on to the next step; NOT_APPLIED on a frozen one compensates', async () => {
  const r = await api.gql(RESOLVE, { id: ids.resolving, outcome: 'APPLIED', data: { id: 'r-manual' } });
  assert.equal(r.errors, undefined, JSON.stringify(r.errors));
  const s = r.data.resolveSagaStep;
  assert.equal(s.__typename, 'MutationResolveSagaStepSuccess', JSON.stringify(s));
  assert.deepEqual(s.data, {
    status: 'RUNNING',
    direction: 'FORWARD',
    currentStep: { name: 'charge' },
    data: { orderId: 'resolving', reservation: 'r-manual' },
    steps: [{ status: 'SUCCEEDED' }, { status: 'RUNNING' }, { status: 'PENDING' }, { status: 'PENDING' }],
  });
  assert.deepEqual(
    (await commands(ids.resolving)).map((c) => `${c.event_type} ${c.direction}`),
    ['inventory.reserve forward', 'postbox.saga.inspect query', 'payments.charge forward'],
  );
  const h = await lastHistory(ids.resolving);
  assert.equal(h.actor, 'test-admin');
  assert.match(h.cause, /checked by hand \(evidence: warehouse system shows the reservation\)/);
  const [a] = await audits(ids.resolving);
  assert.deepEqual(
    [a!.action, a!.outcome, a!.after.outcome, a!.before.status, a!.after.status],
    ['saga.resolve', 'ok', 'applied', 'resolving', 'running'],
  );

  assert.equal((await readSaga(db.sql, ids.unanswered))!.attentionReason, 'query_unanswered');
  const n = (await api.gql(RESOLVE, { id: ids.unanswered, outcome: 'NOT_APPLIED' })).data.resolveSagaStep;
  assert.equal(n.__typename, 'MutationResolveSagaStepSuccess', JSON.stringify(n));
  assert.equal(n.data.status, 'COMPENSATING', 'its compensation goes out to fence the step at the participant');
  assert.deepEqual((await commands(ids.unanswered)).at(-1), {
    event_type: 'inventory.release',
    aggregate_id: `saga:${ids.unanswered}:reserve`,
    direction: 'compensate',
  });
  const withData = await api.gql(RESOLVE, { id: ids.unanswered, outcome: 'NOT_APPLIED', data: { x: 1 } });
  assert.equal(withData.errors?.[0]?.extensions?.code, 'BAD_USER_INPUT');
});

test('closeSaga (admin): closed_manually, nothing more sent, a late reply ignored; the operator may not; a second close is refused', async () => {
  const id = ids.toClose;
  const CLOSE = `mutation ($id: ID!) { closeSaga(sagaId: $id, reason: "order cancelled by phone") {
    __typename ... on Error { code message } ... on MutationCloseSagaSuccess { data { status dueAt allowedActions } } } }`;
  const denied = await api.gql(CLOSE, { id }, api.tokens.operator);
  assert.equal(denied.errors?.[0]?.extensions?.code, 'FORBIDDEN');
  const sentBefore = await commands(id);
  const r = await api.gql(CLOSE, { id }, api.tokens.admin);
  assert.deepEqual(r.data.closeSaga, {
    __typename: 'MutationCloseSagaSuccess',
    data: { status: 'CLOSED_MANUALLY', dueAt: null, allowedActions: [] },
  });
  const saga = (await readSaga(db.sql, id))!;
  assert.equal(saga.status, 'closed_manually');
  assert.deepEqual(await commands(id), sentBefore, 'no further command in the outbox');
  const late = await db.sql.begin((tx) =>
    sagas.onReply(tx, {
      eventId: randomUUID(),
      sagaId: id,
      step: 'reserve',
      direction: 'forward',
      attempt: 1,
      type: 'inventory.reserved',
      data: {},
    }),
  );
  assert.equal(late, 'stale');
  assert.deepEqual(await readSaga(db.sql, id), saga);
  const h = await lastHistory(id);
  assert.deepEqual([h.actor, h.from_status, h.to_status], ['test-admin', 'running', 'closed_manually']);

  const again = await api.gql(CLOSE, { id }, api.tokens.admin);
  assert.equal(again.data.closeSaga.__typename, 'ActionRefusedError');
  assert.match(again.data.closeSaga.message, /closed_manually: nothing more can be done/);
  assert.deepEqual(
    (await audits(id)).map((a) => `${a.action} ${a.outcome}`),
    ['saga.close ok', 'saga.close refused'],
  );
});

test('a control plane without definitions reads sagas but offers no action, and says why an action is refused', async () => {
  const r = await bare.gql(
    'query ($id: ID!) { saga(id: $id) { status definitionLoaded allowedActions steps { name status } } }',
    {
      id: ids.pastPivot,
    },
  );
  assert.deepEqual(r.data.saga, {
    status: 'RUNNING',
    definitionLoaded: false,
    allowedActions: [],
    steps: [
      { name: null, status: 'SUCCEEDED' },
      { name: null, status: 'SUCCEEDED' },
      { name: null, status: 'SUCCEEDED' },
      { name: null, status: 'RUNNING' },
    ],
  });
  const before = await readSaga(db.sql, ids.pastPivot);
  const refused = await bare.gql(
    'mutation ($id: ID!) { retrySagaStep(sagaId: $id, reason: "try") { __typename ... on Error { code message } } }',
    { id: ids.pastPivot },
  );
  assert.equal(refused.data.retrySagaStep.__typename, 'ActionRefusedError');
  assert.equal(refused.data.retrySagaStep.code, 'saga_definition_missing');
  assert.match(refused.data.retrySagaStep.message, /ops-order v1.*POSTBOX_SAGA_MODULES/);
  assert.deepEqual(await readSaga(db.sql, ids.pastPivot), before);
  const missing = await bare.gql('mutation ($id: ID!) { closeSaga(sagaId: $id, reason: "x") { __typename } }', {
    id: randomUUID(),
  });
  assert.equal(missing.data.closeSaga.__typename, 'NotFoundError');
});
