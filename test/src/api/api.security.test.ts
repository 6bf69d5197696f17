import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  getIntrospectionQuery,
  getNamedType,
  isEnumType,
  isInputObjectType,
  isNonNullType,
  isListType,
  type GraphQLInputType,
} from 'graphql';
import { schema } from '@postbox/api';
import { enqueue } from '@postbox/engine';
import { startTestApi, type Role, type TestApi } from '../support/api.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';

// Who may do what, and what never reaches execution. The mutation × scope matrix is walked from the schema
// itself, so a new mutation without an entry here fails this test.

let db: TestDatabase;
let api: TestApi;

/** The least scope each mutation needs. */
const REQUIRED: Record<string, Role> = {
  replayFailures: 'operator',
  retryNow: 'operator',
  republish: 'operator',
  skipEvent: 'admin',
  retrySagaStep: 'operator',
  resolveSagaStep: 'operator',
  compensateSaga: 'operator',
  markStepCompensated: 'operator',
  resumeSaga: 'operator',
  closeSaga: 'admin',
  runReconciliation: 'operator',
  repairFindings: 'operator',
  ignoreFinding: 'admin',
};
const HOLDS: Record<Role | 'anonymous', Role[]> = {
  anonymous: [],
  viewer: ['viewer'],
  payload: ['viewer', 'payload'],
  operator: ['viewer', 'operator'],
  admin: ['viewer', 'operator', 'admin', 'payload'],
};

before(async () => {
  db = await freshDatabase();
  api = await startTestApi(db.url);
  // Something a mutation could change if it ran: a published outbox row (republish would set it pending).
  await db.sql.begin((tx) =>
    enqueue(
      tx,
      { event_type: 'T', aggregate_id: 'sec-1', aggregate_version: 1, data: { secret: 'x' } },
      { topic: 'api.sec', producer: 't' },
    ),
  );
  await db.sql`UPDATE message_outbox SET status = 'published', published_at = now()`;
});

after(async () => {
  await api.close();
  await db.drop();
});

/** A literal for an argument of this type (required ones only, plus `reason`). */
function literal(type: GraphQLInputType, name: string): string {
  const t = isNonNullType(type) ? type.ofType : type;
  if (isListType(t)) return `[${literal(t.ofType, name)}]`;
  if (isInputObjectType(t)) return '{}';
  if (isEnumType(t)) return t.getValues()[0]!.name;
  switch (getNamedType(t).name) {
    case 'ID':
      return '"01900000-0000-7000-8000-000000000000"';
    case 'Int':
      return '1';
    case 'Boolean':
      return 'false';
    default:
      return name === 'aggregateId' ? '"sec-1"' : '"scope walk"';
  }
}

async function stateSnapshot() {
  const [row] = await db.sql`SELECT
    (SELECT json_agg(json_build_object('s', status, 'a', available_at) ORDER BY event_id) FROM message_outbox) AS outbox,
    (SELECT count(*) FROM message_retry) AS retries, (SELECT count(*) FROM message_failure) AS failures,
    (SELECT count(*) FROM message_inbox) AS inbox, (SELECT count(*) FROM consumer_aggregate_version) AS versions`;
  return row;
}

test('every mutation × every scope: allowed ones run (a typed result), others are FORBIDDEN, change nothing, and the denial is audited', async () => {
  const mutations = schema.getMutationType()!.getFields();
  assert.deepEqual(
    Object.keys(mutations).sort(),
    Object.keys(REQUIRED).sort(),
    'every mutation has a required scope in this test',
  );
  for (const [name, field] of Object.entries(mutations)) {
    const args = field.args
      .filter((a) => isNonNullType(a.type) || a.name === 'reason')
      .map((a) => `${a.name}: ${literal(a.type, a.name)}`);
    const query = `mutation { ${name}${args.length ? `(${args.join(', ')})` : ''} { __typename } }`;
    for (const role of Object.keys(HOLDS) as Array<Role | 'anonymous'>) {
      const allowed = HOLDS[role].includes(REQUIRED[name]!);
      const before = await stateSnapshot();
      const auditsBefore = (
        await db.sql<
          { n: number }[]
        >`SELECT count(*)::int AS n FROM operator_audit WHERE action = ${name} AND outcome = 'denied'`
      )[0]!.n;
      const token = role === 'anonymous' ? null : api.tokens[role];
      const r = await api.gql(query, {}, token);
      if (allowed) {
        assert.equal(r.errors, undefined, `${role} may ${name}: ${JSON.stringify(r.errors)}`);
        assert.match(r.data[name].__typename, /Success$|Error$/, `${role} ${name} returns a typed result`);
        if (name === 'republish') await db.sql`UPDATE message_outbox SET status = 'published'`; // undo the allowed run
      } else {
        assert.equal(r.errors?.[0]?.extensions?.code, 'FORBIDDEN', `${role} must not ${name}: ${JSON.stringify(r)}`);
        assert.equal(r.data, null);
        assert.deepEqual(await stateSnapshot(), before, `${role} ${name} changed nothing`);
        const actor = role === 'anonymous' ? 'anonymous' : `test-${role}`;
        const n = (
          await db.sql<
            { n: number }[]
          >`SELECT count(*)::int AS n FROM operator_audit WHERE action = ${name} AND outcome = 'denied' AND actor = ${actor}`
        )[0]!.n;
        assert.ok(n >= 1 && (await deniedCount(name)) === auditsBefore + 1, `${role} ${name} denial audited`);
      }
    }
  }
  const audited = (
    await db.sql<
      { n: number }[]
    >`SELECT count(*)::int AS n FROM operator_audit WHERE outcome = 'ok' OR outcome = 'refused'`
  )[0]!.n;
  assert.ok(audited >= 4, 'allowed runs wrote audit rows with the caller');
});

async function deniedCount(action: string): Promise<number> {
  const n = (
    await db.sql<
      { n: number }[]
    >`SELECT count(*)::int AS n FROM operator_audit WHERE action = ${action} AND outcome = 'denied'`
  )[0]!.n;
  return n;
}

test('queries need a token; the viewer reads but holds no payload', async () => {
  const anonymous = await api.gql('{ backlog { outbox { pending } } }', {}, null);
  assert.equal(anonymous.errors?.[0]?.extensions?.code, 'FORBIDDEN');
  const health = await api.gql('{ health { ready } }', {}, null);
  assert.equal(health.errors, undefined, 'readiness is open to probes');
  assert.equal(typeof health.data.health.ready, 'boolean');
  const details = await api.gql('{ health { ready checks { name ok } } }', {}, null);
  assert.equal(details.errors?.[0]?.extensions?.code, 'FORBIDDEN', 'the details are not');
  const viewer = await api.gql('{ health { ready checks { name ok } } }', {}, api.tokens.viewer);
  assert.deepEqual(viewer.data.health.checks.map((c: { name: string }) => c.name).sort(), [
    'kafka',
    'postgres',
    'redis',
  ]);
  assert.equal(viewer.data.health.ready, true, JSON.stringify(viewer.data));
});

test('depth bomb, 1,000 aliases, an oversized query and a batched request are refused before execution', async () => {
  const before = await stateSnapshot();
  let deep = 'name';
  for (let i = 0; i < 40; i++) deep = `ofType { ${deep} }`;
  const depth = await api.gql(`{ __schema { types { fields { type { ${deep} } } } } }`, {}, api.tokens.admin);
  assert.match(depth.errors?.[0]?.message ?? '', /depth/i, JSON.stringify(depth).slice(0, 300));
  assert.equal(depth.data, null);

  const aliases = Array.from(
    { length: 1000 },
    (_, i) => `a${i}: republish(aggregateId: "sec-1", fromVersion: 1, reason: "bomb") { __typename }`,
  ).join(' ');
  const alias = await api.gql(`mutation { ${aliases} }`, {}, api.tokens.admin);
  assert.ok(alias.errors?.length, 'refused');
  assert.match(alias.errors!.map((e) => e.message).join(' '), /alias|token|limit/i);
  assert.equal(alias.data, null);

  const huge = await api.post(
    JSON.stringify({ query: `{ health { ready } } # ${'x'.repeat(100_000)}` }),
    api.tokens.admin,
  );
  assert.equal(huge.status, 413, 'a body over 64 KiB is refused unread');
  const tokens = await api.gql(
    `{ ${Array.from({ length: 3000 }, () => 'health { ready }').join(' ')} }`,
    {},
    api.tokens.admin,
  );
  assert.match(tokens.errors?.[0]?.message ?? '', /token/i, 'too many tokens');

  const batched = await api.post(
    JSON.stringify([
      { query: '{ health { ready } }' },
      { query: 'mutation { republish(aggregateId: "sec-1", fromVersion: 1, reason: "b") { __typename } }' },
    ]),
    api.tokens.admin,
  );
  assert.ok(
    batched.status >= 400 || batched.json.errors,
    `batched request refused: ${JSON.stringify(batched.json).slice(0, 200)}`,
  );
  assert.deepEqual(await stateSnapshot(), before, 'nothing ran');

  const suggestion = await api.gql('{ backlg { at } }', {}, api.tokens.admin);
  assert.doesNotMatch(JSON.stringify(suggestion.errors), /Did you mean/, 'no field suggestions');
});

test('introspection is refused in production mode except for admin; allowed in development', async () => {
  const INTROSPECT = '{ __schema { queryType { name } } }';
  assert.equal((await api.gql(INTROSPECT, {}, api.tokens.viewer)).data?.__schema.queryType.name, 'Query');
  const full = await api.gql(getIntrospectionQuery(), {}, api.tokens.viewer);
  assert.equal(full.errors, undefined, `GraphiQL's introspection passes the limits: ${JSON.stringify(full.errors)}`);
  const prod = await startTestApi(db.url, { production: true });
  try {
    const viewer = await prod.gql(INTROSPECT, {}, prod.tokens.viewer);
    assert.match(viewer.errors?.[0]?.message ?? '', /introspection/i);
    assert.equal(viewer.data, null);
    assert.equal((await prod.gql(INTROSPECT, {}, prod.tokens.admin)).data?.__schema.queryType.name, 'Query');
    const page = await fetch(prod.url, { headers: { accept: 'text/html' } });
    assert.doesNotMatch(await page.text(), /graphiql/i, 'no GraphiQL in production');
  } finally {
    await prod.close();
  }
});

test('hostile filter values get clean validation errors (or, when legitimate, plain empty answers); no raw database error', async () => {
  const F =
    'query ($f: FailureFilter, $first: Int, $after: String) { failures(filter: $f, first: $first, after: $after) { edges { node { id } } } }';
  const ok = async (vars: Record<string, unknown>) => {
    const r = await api.gql(F, vars, api.tokens.viewer);
    assert.equal(r.errors, undefined, JSON.stringify(r.errors));
    assert.deepEqual(r.data.failures.edges, []);
  };
  const bad = async (query: string, vars: Record<string, unknown>, argument: RegExp) => {
    const r = await api.gql(query, vars, api.tokens.admin);
    const e = r.errors?.[0];
    assert.ok(e, `refused: ${JSON.stringify(vars)}`);
    assert.notEqual(e.message, 'Unexpected error.', `a clean message for ${JSON.stringify(vars).slice(0, 80)}`);
    assert.match(`${e.extensions?.argument ?? ''} ${e.message}`, argument);
    assert.doesNotMatch(e.message, /postgres|syntax error at|invalid byte sequence|SQLSTATE/i);
  };
  await ok({ f: { consumer: "'; DROP TABLE message_failure; --" } });
  await ok({ f: { errorCode: '%' } });
  await ok({ f: { eventType: '\\\\' } });
  await bad(F, { f: { consumer: 'a\u0000b' } }, /filter\.consumer.*control characters/);
  await bad(F, { f: { eventType: 'x'.repeat(10_000) } }, /filter\.eventType.*at most 200/);
  await bad(F, { first: 1_000_000 }, /first.*1…100/);
  await bad(F, { first: 0 }, /first/);
  await bad(F, { after: 'not-a-cursor' }, /after.*cursor/);
  await bad(F, { f: { since: 'yesterday' } }, /ISO-8601|DateTime/);
  await bad(F, { f: { since: '2026-12-02T00:00:00Z', until: '2026-12-01T00:00:00Z' } }, /since.*before until/);
  await bad('query ($id: ID!) { event(id: $id) { id } }', { id: "1' OR '1'='1" }, /id.*UUID/);
  await bad('{ auditLog(first: 101) { edges { node { id } } } }', {}, /first/);
  await bad('mutation { replayFailures(reason: "   ") { __typename } }', {}, /reason.*empty/);
  await bad('mutation { replayFailures(reason: "x", limit: 5000) { __typename } }', {}, /limit/);
  await bad('mutation { skipEvent(consumer: "c", eventId: "nope", reason: "r") { __typename } }', {}, /eventId.*UUID/);
  const n = (await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_failure`)[0]!.n;
  assert.equal(n, 0, 'still there');
});
