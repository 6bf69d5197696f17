import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { startTelemetry, type Telemetry } from '@postbox/api';
import { demoOrderSource } from '@postbox/api/demo/reconcile';
import { createLogger } from '@postbox/engine';
import { startTestApi, type TestApi } from '../support/api.ts';
import { freePort } from '@postbox/stack';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { waitFor } from '../support/processes.ts';
import { payWithoutEvent, placeOrder } from '../reconcile/fixtures.ts';

// Reconciliation through the control plane over real HTTP, on a real database: orders placed the normal way, then
// three paid by a code path that bypassed enqueue (business row at version 2, no outbox row). Runs and findings
// are read through GraphQL, a dry run changes nothing, executed repairs re-emit through the demo's own command,
// an ignored finding stays ignored, hostile requests come back as typed errors and leave audit rows, and the
// findings gauge on the Prometheus endpoint says what the rows say.

let db: TestDatabase;
let api: TestApi;
let telemetry: Telemetry;
let metricsPort: number;
const topic = 'api.reconcile.orders';
const ORDERS = ['o-1', 'o-2', 'o-3', 'o-4', 'o-5'];
const BROKEN = ['o-2', 'o-3', 'o-5'];

before(async () => {
  // The SDK first: the gauge registers with the meter provider there is when the control plane starts.
  metricsPort = await freePort();
  telemetry = await startTelemetry('test', {
    env: { POSTBOX_METRICS_PORT: String(metricsPort), POSTBOX_METRICS_HOST: '127.0.0.1' },
    log: createLogger({ level: 'warn', name: 'api-reconcile-test' }),
  });
  db = await freshDatabase();
  api = await startTestApi(db.url, {
    reconcile: { sources: [demoOrderSource({ topic, consumers: [] })] },
    // Rows the test enqueues stay pending (no relay): they are not "unpublished" findings within the test.
    reconcileGraceMs: { 'outbox-missing': 600_000 },
  });
  for (const id of ORDERS) await placeOrder(db.sql, topic, id);
  for (const id of BROKEN) await payWithoutEvent(db.sql, id);
});

after(async () => {
  await api?.close();
  await db?.drop();
  await telemetry?.shutdown();
});

async function outboxRows(orderId: string) {
  const rows = await db.sql<{ aggregate_version: string; event_type: string }[]>`
    SELECT aggregate_version::text, event_type FROM message_outbox WHERE aggregate_id = ${orderId} ORDER BY 1`;
  return rows.map((r) => ({ ...r }));
}

async function audits(action: string, afterId = 0) {
  return db.sql<{ actor: string; outcome: string; reason: string | null; target: string; after: any }[]>`
    SELECT actor, outcome, reason, target, after FROM operator_audit WHERE action = ${action} AND audit_id > ${afterId}
    ORDER BY audit_id`;
}

async function findingIds(status?: string): Promise<Array<{ id: number; key: string }>> {
  const r = await api.gql(
    `query ($f: ReconciliationFindingFilter) { findings(first: 100, filter: $f) { edges { node { id key } } } }`,
    { f: { check: 'OUTBOX_MISSING', ...(status ? { status } : {}) } },
    api.tokens.viewer,
  );
  assert.equal(r.errors, undefined, JSON.stringify(r.errors));
  return r.data.findings.edges.map((e: any) => e.node);
}

/** The findings gauge as Prometheus shows it, per (check, status). */
async function gauge(check: string, status: string): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const line = text
    .split('\n')
    .find(
      (l) =>
        l.startsWith('postbox_reconcile_findings_open{') &&
        l.includes(`postbox_reconcile_check="${check}"`) &&
        l.includes(`postbox_reconcile_finding_status="${status}"`),
    );
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}

const RUN = `mutation ($check: ReconcileCheck!, $dryRun: Boolean, $reason: String) {
  runReconciliation(check: $check, dryRun: $dryRun, reason: $reason) {
    __typename ... on Error { code message }
    ... on MutationRunReconciliationSuccess { data {
      run { id check mode status actor counts error }
      repair { runId dryRun status counts { planned repaired wouldRepair stale manual failed }
               items { findingId key kind outcome action detail auditId } } } } } }`;

test('the checks this control plane can run, and why the others cannot', async () => {
  const r = await api.gql('{ reconciliationChecks { check graceMs unavailable description } }', {}, api.tokens.viewer);
  assert.equal(r.errors, undefined, JSON.stringify(r.errors));
  const byCheck = Object.fromEntries(r.data.reconciliationChecks.map((c: any) => [c.check, c]));
  assert.equal(r.data.reconciliationChecks.length, 7);
  assert.equal(byCheck.OUTBOX_MISSING.unavailable, null);
  assert.equal(byCheck.OUTBOX_MISSING.graceMs, 600_000);
  assert.equal(byCheck.RETRY_JOB_MISSING.unavailable, null, 'the control plane has REDIS_URL');
  assert.match(byCheck.SAGA_STEP_MISMATCH.unavailable, /participant records/);
});

test('runReconciliation finds the orders paid without their event; its dry run re-checks them and changes nothing', async () => {
  const r = await api.gql(RUN, { check: 'OUTBOX_MISSING' }, api.tokens.operator);
  assert.equal(r.errors, undefined, JSON.stringify(r.errors));
  const { run, repair } = r.data.runReconciliation.data;
  assert.deepEqual(
    { check: run.check, mode: run.mode, status: run.status, actor: run.actor, error: run.error },
    { check: 'OUTBOX_MISSING', mode: 'CHECK', status: 'FINISHED', actor: 'test-operator', error: null },
  );
  assert.deepEqual(run.counts, { scanned: 5, found: 3, opened: 3, reopened: 0, closed: 0 });
  assert.equal(repair.dryRun, true);
  assert.equal(repair.status, 'finished');
  assert.deepEqual(repair.counts, { planned: 3, repaired: 0, wouldRepair: 3, stale: 0, manual: 0, failed: 0 });
  assert.deepEqual(
    repair.items.map((i: any) => `${i.key} ${i.kind} ${i.outcome} ${i.action}`),
    BROKEN.map((id) => `demo-order:${id}@2 missing_row WOULD_REPAIR reemit demo-order:${id}@2`),
  );
  for (const id of BROKEN)
    assert.deepEqual(await outboxRows(id), [{ aggregate_version: '1', event_type: 'OrderPlaced' }]);
  assert.deepEqual(
    (await findingIds('OPEN')).map((f) => f.key),
    BROKEN.map((id) => `demo-order:${id}@2`),
  );
  const [dry] = await audits('reconcile.dry_run');
  assert.equal(dry!.actor, 'test-operator');
  assert.equal(dry!.after.would_repair, 3);

  // The gauge reads the rows: three open outbox-missing findings, every other series 0.
  await waitFor('the findings gauge at 3', async () => (await gauge('outbox-missing', 'open')) === 3, 20_000, 500);
  assert.equal(await gauge('outbox-missing', 'manual'), 0);
  assert.equal(await gauge('consumer-behind', 'open'), 0);
});

test('findings filtered by status, key, key prefix and run; findings and runs paged with cursors', async () => {
  const PAGE = `query ($after: String, $f: ReconciliationFindingFilter) { findings(first: 2, after: $after, filter: $f) {
    edges { cursor node { id key kind status expected observed firstRunId lastRunId } } pageInfo { hasNextPage endCursor } } }`;
  const f = { check: 'OUTBOX_MISSING', status: 'OPEN' };
  const first = (await api.gql(PAGE, { f }, api.tokens.viewer)).data.findings;
  assert.equal(first.edges.length, 2);
  assert.equal(first.pageInfo.hasNextPage, true);
  const second = (await api.gql(PAGE, { f, after: first.pageInfo.endCursor }, api.tokens.viewer)).data.findings;
  assert.equal(second.pageInfo.hasNextPage, false);
  const nodes = [...first.edges, ...second.edges].map((e: any) => e.node);
  assert.deepEqual(
    nodes.map((n: any) => n.key),
    BROKEN.map((id) => `demo-order:${id}@2`),
  );
  assert.deepEqual(nodes[0].expected, {
    aggregateType: 'demo-order',
    aggregateId: 'o-2',
    version: 2,
    outbox: 'published',
  });
  assert.deepEqual(nodes[0].observed, { outbox: null });

  const runId = nodes[0].firstRunId;
  const byRun = (await api.gql(PAGE, { f: { runId } }, api.tokens.viewer)).data.findings;
  assert.equal(byRun.edges.length, 2, 'the run found three (a page of two)');
  const byKey = (await api.gql(PAGE, { f: { key: 'demo-order:o-3@2' } }, api.tokens.viewer)).data.findings;
  assert.deepEqual(
    byKey.edges.map((e: any) => e.node.key),
    ['demo-order:o-3@2'],
  );
  const byPrefix = (await api.gql(PAGE, { f: { keyPrefix: 'demo-order:o-5@' } }, api.tokens.viewer)).data.findings;
  assert.deepEqual(
    byPrefix.edges.map((e: any) => e.node.key),
    ['demo-order:o-5@2'],
  );
  const none = (await api.gql(PAGE, { f: { check: 'SAGA_OVERDUE' } }, api.tokens.viewer)).data.findings;
  assert.deepEqual(none.edges, []);

  // A second dry run adds runs; they come newest first, two a page.
  await api.gql(RUN, { check: 'OUTBOX_MISSING' }, api.tokens.operator);
  const RUNS = `query ($after: String) { reconciliationRuns(first: 2, after: $after, filter: { check: OUTBOX_MISSING }) {
    edges { node { id mode status } } pageInfo { hasNextPage endCursor } } }`;
  const runs: any[] = [];
  let after: string | null = null;
  for (let page = 0; page < 5; page++) {
    const r: any = (await api.gql(RUNS, { after }, api.tokens.viewer)).data.reconciliationRuns;
    runs.push(...r.edges.map((e: any) => e.node));
    if (!r.pageInfo.hasNextPage) break;
    after = r.pageInfo.endCursor;
  }
  assert.deepEqual(
    runs.map((r) => r.mode),
    ['DRY_RUN', 'CHECK', 'DRY_RUN', 'CHECK'],
  );
  assert.ok(runs.every((r, i) => i === 0 || r.id < runs[i - 1].id));
  const one = await api.gql('query ($id: Int!) { reconciliationRun(id: $id) { id mode } }', { id: runs[1].id });
  assert.deepEqual(one.data.reconciliationRun, { id: runs[1].id, mode: 'CHECK' });
  const bad = await api.gql('{ findings(after: "bm9wZQ") { edges { cursor } } }', {}, api.tokens.viewer);
  assert.equal(bad.errors?.[0]?.extensions?.code, 'BAD_USER_INPUT');
});

const REPAIR = `mutation ($ids: [Int!], $filter: ReconciliationFindingFilter, $dryRun: Boolean, $reason: String!,
                          $limit: Int, $pacing: RepairPacing) {
  repairFindings(check: OUTBOX_MISSING, ids: $ids, filter: $filter, dryRun: $dryRun, reason: $reason, limit: $limit,
                 pacing: $pacing) {
    __typename ... on Error { code message }
    ... on MutationRepairFindingsSuccess { data { runId dryRun status
      counts { planned repaired wouldRepair stale manual failed } items { findingId key outcome auditId } } } } }`;

test('repairFindings: a filter as a dry run changes nothing; by id it re-emits through the command, audited', async () => {
  const dry = await api.gql(REPAIR, { filter: { keyPrefix: 'demo-order:o-2@' }, reason: 'look first' });
  assert.equal(dry.errors, undefined, JSON.stringify(dry.errors));
  assert.deepEqual(dry.data.repairFindings.data.counts, {
    planned: 1,
    repaired: 0,
    wouldRepair: 1,
    stale: 0,
    manual: 0,
    failed: 0,
  });
  assert.deepEqual(await outboxRows('o-2'), [{ aggregate_version: '1', event_type: 'OrderPlaced' }]);

  const [o2] = (await findingIds('OPEN')).filter((f) => f.key === 'demo-order:o-2@2');
  const r = await api.gql(
    REPAIR,
    { ids: [o2!.id], dryRun: false, reason: 'payment path skipped enqueue (INC-7)', pacing: { ratePerSecond: 50 } },
    api.tokens.operator,
  );
  assert.equal(r.errors, undefined, JSON.stringify(r.errors));
  const report = r.data.repairFindings.data;
  assert.equal(report.dryRun, false);
  assert.equal(report.status, 'finished');
  assert.deepEqual(report.counts, { planned: 1, repaired: 1, wouldRepair: 0, stale: 0, manual: 0, failed: 0 });
  assert.equal(report.items[0].outcome, 'REPAIRED');
  assert.deepEqual(await outboxRows('o-2'), [
    { aggregate_version: '1', event_type: 'OrderPlaced' },
    { aggregate_version: '2', event_type: 'OrderPaid' },
  ]);
  for (const id of ['o-3', 'o-5']) assert.equal((await outboxRows(id)).length, 1, `${id} untouched`);
  const [audit] = await audits('reconcile.reemit');
  assert.deepEqual(
    { actor: audit!.actor, outcome: audit!.outcome, reason: audit!.reason, target: audit!.target },
    {
      actor: 'test-operator',
      outcome: 'ok',
      reason: 'payment path skipped enqueue (INC-7)',
      target: 'reconcile:outbox-missing:demo-order:o-2@2',
    },
  );
  assert.equal(report.items[0].auditId !== null, true);
  const repaired = await api.gql(
    'query ($f: ReconciliationFindingFilter) { findings(filter: $f) { edges { node { status repair } } } }',
    {
      f: { key: 'demo-order:o-2@2' },
    },
  );
  assert.equal(repaired.data.findings.edges[0].node.status, 'REPAIRED');
  assert.equal(repaired.data.findings.edges[0].node.repair.actor, 'test-operator');
});

test('ignoreFinding (admin): closed as ignored, audited, and it stays ignored when seen again', async () => {
  const [o3] = (await findingIds('OPEN')).filter((f) => f.key === 'demo-order:o-3@2');
  const IGNORE = `mutation ($id: Int!, $reason: String!) { ignoreFinding(id: $id, reason: $reason) {
    __typename ... on Error { code message } ... on MutationIgnoreFindingSuccess { data { id status closedAt } } } }`;
  const denied = await api.gql(IGNORE, { id: o3!.id, reason: 'test order' }, api.tokens.operator);
  assert.equal(denied.errors?.[0]?.extensions?.code, 'FORBIDDEN');
  const r = await api.gql(IGNORE, { id: o3!.id, reason: 'a test order, never shipped' }, api.tokens.admin);
  assert.equal(r.data.ignoreFinding.__typename, 'MutationIgnoreFindingSuccess', JSON.stringify(r));
  assert.equal(r.data.ignoreFinding.data.status, 'IGNORED');
  assert.notEqual(r.data.ignoreFinding.data.closedAt, null);
  const missing = await api.gql(IGNORE, { id: 999_999, reason: 'typo' }, api.tokens.admin);
  assert.equal(missing.data.ignoreFinding.__typename, 'NotFoundError');
  assert.deepEqual(
    (await audits('reconcile.ignore')).map((a) => `${a.actor} ${a.outcome} ${a.target} ${a.reason}`),
    [
      'test-admin ok reconcile:outbox-missing:demo-order:o-3@2 a test order, never shipped',
      'test-admin refused reconcile:finding:999999 typo',
    ],
  );
  assert.deepEqual(
    (await audits('ignoreFinding')).map((a) => `${a.actor} ${a.outcome}`),
    ['test-operator denied'],
    'the denied scope is audited under the field',
  );
  // Seen again by the next run: still ignored, and no repair touches it.
  const again = await api.gql(RUN, { check: 'OUTBOX_MISSING' }, api.tokens.operator);
  assert.deepEqual(again.data.runReconciliation.data.run.counts, {
    scanned: 5,
    found: 2,
    opened: 0,
    reopened: 0,
    closed: 0,
  });
  assert.deepEqual(
    again.data.runReconciliation.data.repair.items.map((i: any) => i.key),
    ['demo-order:o-5@2'],
  );
  const status = await api.gql('{ findings(filter: { key: "demo-order:o-3@2" }) { edges { node { status } } } }');
  assert.equal(status.data.findings.edges[0].node.status, 'IGNORED');
});

test('hostile requests: typed errors, nothing changed, and every refusal audited with the caller', async () => {
  const [row] = await db.sql<{ last: number }[]>`SELECT coalesce(max(audit_id), 0)::int AS last FROM operator_audit`;
  const last = row!.last;
  const outboxBefore = await db.sql`SELECT count(*)::int AS n FROM message_outbox`;
  const runsBefore = await db.sql`SELECT count(*)::int AS n FROM reconciliation_run`;
  const code = (r: any) => r.errors?.[0]?.extensions?.code;
  const cases: Array<[string, any]> = [
    ['limit', await api.gql(REPAIR, { reason: 'x', limit: 1_000_000 })],
    ['rate', await api.gql(REPAIR, { reason: 'x', dryRun: false, pacing: { ratePerSecond: 10_000 } })],
    ['canary', await api.gql(REPAIR, { reason: 'x', pacing: { canary: -1 } })],
    ['ratio', await api.gql(REPAIR, { reason: 'x', pacing: { maxErrorRatio: 2 } })],
    ['blank reason', await api.gql(REPAIR, { reason: '   ' })],
    ['ids and filter', await api.gql(REPAIR, { reason: 'x', ids: [1], filter: { kind: 'missing_row' } })],
    ['too many ids', await api.gql(REPAIR, { reason: 'x', ids: Array.from({ length: 1001 }, (_, i) => i + 1) })],
    ['other check', await api.gql(REPAIR, { reason: 'x', filter: { check: 'SAGA_OVERDUE' } })],
    ['closed status', await api.gql(REPAIR, { reason: 'x', filter: { status: 'REPAIRED' } })],
    ['control character', await api.gql(REPAIR, { reason: 'x', filter: { key: 'demo-order:\u0000' } })],
    ['execute without reason', await api.gql(RUN, { check: 'OUTBOX_MISSING', dryRun: false })],
  ];
  for (const [what, r] of cases) assert.equal(code(r), 'BAD_USER_INPUT', `${what}: ${JSON.stringify(r)}`);

  const missingReason = await api.gql('mutation { repairFindings(check: OUTBOX_MISSING) { __typename } }');
  assert.equal(code(missingReason), 'GRAPHQL_VALIDATION_FAILED', 'reason is required by the schema');
  const unknownCheck = await api.gql('mutation { runReconciliation(check: NOPE) { __typename } }');
  assert.equal(code(unknownCheck), 'GRAPHQL_VALIDATION_FAILED');
  const big = await api.gql('{ findings(first: 101) { edges { cursor } } }', {}, api.tokens.viewer);
  assert.equal(code(big), 'BAD_USER_INPUT', JSON.stringify(big));
  const huge = await api.gql('{ findings(first: 100000) { edges { cursor } } }', {}, api.tokens.viewer);
  assert.match(huge.errors?.[0]?.message ?? '', /Query Cost limit/, 'refused before it runs');
  const badRun = await api.gql('{ findings(filter: { runId: -4 }) { edges { cursor } } }', {}, api.tokens.viewer);
  assert.equal(code(badRun), 'BAD_USER_INPUT');
  const anonymous = await api.gql('{ findings { edges { cursor } } }', {}, null);
  assert.equal(code(anonymous), 'FORBIDDEN');
  const viewer = await api.gql(RUN, { check: 'OUTBOX_MISSING' }, api.tokens.viewer);
  assert.equal(code(viewer), 'FORBIDDEN');

  const nothing = await api.gql(REPAIR, { reason: 'x', filter: { key: 'demo-order:o-1@1' } }, api.tokens.operator);
  assert.equal(nothing.data.repairFindings.__typename, 'ActionRefusedError');
  assert.equal(nothing.data.repairFindings.code, 'reconcile_nothing_to_repair');

  assert.deepEqual(await db.sql`SELECT count(*)::int AS n FROM message_outbox`, outboxBefore, 'nothing enqueued');
  assert.deepEqual(await db.sql`SELECT count(*)::int AS n FROM reconciliation_run`, runsBefore, 'no run started');
  const repairs = await audits('reconcile.repair', last);
  assert.equal(repairs.length, 11, JSON.stringify(repairs.map((a) => a.after)));
  assert.ok(repairs.every((a) => a.outcome === 'refused' && a.target === 'reconcile:outbox-missing'));
  assert.ok(repairs.slice(0, 10).every((a) => a.actor === 'test-admin'));
  assert.deepEqual(
    repairs.slice(0, 10).map((a) => a.after.argument),
    [
      'limit',
      'pacing.ratePerSecond',
      'pacing.canary',
      'pacing.maxErrorRatio',
      'reason',
      'ids',
      'ids',
      'filter.check',
      'filter.status',
      'filter.key',
    ],
  );
  assert.equal(repairs[10]!.after.code, 'reconcile_nothing_to_repair');
  assert.equal(repairs[10]!.actor, 'test-operator');
  assert.deepEqual(
    (await audits('reconcile.run', last)).map((a) => `${a.actor} ${a.outcome} ${a.after.argument}`),
    ['test-admin refused reason'],
  );
  assert.deepEqual(
    (await audits('runReconciliation', last)).map((a) => `${a.actor} ${a.outcome}`),
    ['test-viewer denied'],
  );
});

test('an executed run repairs what is left; the next run finds nothing and the gauge reads 0', async () => {
  const r = await api.gql(RUN, { check: 'OUTBOX_MISSING', dryRun: false, reason: 'reconcile after INC-7' });
  assert.equal(r.errors, undefined, JSON.stringify(r.errors));
  const { run, repair } = r.data.runReconciliation.data;
  assert.equal(run.counts.found, 2, 'o-5 open, o-3 ignored');
  assert.deepEqual(repair.counts, { planned: 1, repaired: 1, wouldRepair: 0, stale: 0, manual: 0, failed: 0 });
  assert.equal((await outboxRows('o-5')).length, 2);
  assert.equal((await outboxRows('o-3')).length, 1, 'the ignored one is left alone');

  const next = await api.gql(RUN, { check: 'OUTBOX_MISSING' });
  assert.deepEqual(next.data.runReconciliation.data.run.counts, {
    scanned: 5,
    found: 1,
    opened: 0,
    reopened: 0,
    closed: 0,
  });
  assert.equal(next.data.runReconciliation.data.repair, null, 'only the ignored one is still seen: nothing to repair');
  assert.deepEqual(await findingIds('OPEN'), []);
  await waitFor('the findings gauge at 0', async () => (await gauge('outbox-missing', 'open')) === 0, 20_000, 500);
});
