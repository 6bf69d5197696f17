import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { enqueue, type Sql } from '@postbox/engine';
import { startTestApi, type TestApi } from '../support/api.ts';
import { ceRecord, committedOffsets, createHandlerTables, produce, TEST_CONSUMER_MODULE } from '../support/consumer.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { writeEvents } from '../support/events.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// The control plane over real HTTP against real roles: a `postbox relay` and `postbox consume` processes move
// events while a GraphQL client watches; every figure is checked against the database or the broker.

let db: TestDatabase;
let api: TestApi;
const topic = uniqueTopic('api-ops');
const processes: RoleProcess[] = [];

before(async () => {
  db = await freshDatabase();
  await createHandlerTables(db.sql);
  await createTopic(topic, 3);
  api = await startTestApi(db.url, { topics: `${topic}:3` });
  processes.push(
    spawnPostbox(['relay'], {
      ...stack,
      DATABASE_URL: db.url,
      POSTBOX_TOPICS: `${topic}:3`,
      POSTBOX_RELAY_THREADS: '0',
      LOG_LEVEL: 'warn',
    }),
  );
});

after(async () => {
  for (const p of processes) p.kill('SIGTERM');
  await Promise.all(processes.map((p) => p.exited));
  await api.close();
  await db.drop();
});

function consume(consumer: string, retry: Record<string, number>): RoleProcess {
  const p = spawnPostbox(['consume', TEST_CONSUMER_MODULE], {
    DATABASE_URL: db.url,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
    REDIS_URL: stack.REDIS_URL,
    TEST_TOPIC: topic,
    TEST_CONSUMER: consumer,
    TEST_RETRY: JSON.stringify(retry),
    LOG_LEVEL: 'warn',
  });
  processes.push(p);
  return p;
}

async function write(sql: Sql, aggregate: string, version: number, data: unknown = { v: version }): Promise<string> {
  return sql.begin(
    async (tx) =>
      (
        await enqueue(
          tx,
          { event_type: 'TestEvent', aggregate_id: aggregate, aggregate_version: version, data },
          { topic, producer: 'api-test' },
        )
      ).event_id,
  );
}

const EVENT = `query ($id: ID!) { event(id: $id) {
  id aggregateId aggregateVersion
  outbox { status topic partition offset attempts }
  consumers { consumer state duplicateDeliveries retryAttempt nextRetryAt failureId errorCode aggregateVersionApplied } } }`;

async function eventOf(id: string) {
  const r = await api.gql(EVENT, { id }, api.tokens.viewer);
  assert.equal(r.errors, undefined, JSON.stringify(r.errors));
  return r.data.event;
}

async function stateOf(id: string, consumer: string): Promise<string | undefined> {
  return (await eventOf(id))?.consumers.find((c: { consumer: string }) => c.consumer === consumer)?.state;
}

const BACKLOG = `{ backlog { outbox { pending publishing failed oldestPendingAgeMs publishRate topics { topic pending } }
  consumers { consumer groupId topics lag consumeRate produceRate retriesWaiting parked blockedAggregates failures drainSeconds
              partitions { topic partition high committed lag } } brokerError } }`;

test('event(id) follows an event from outbox to each consumer stage; backlog numbers match the database and the broker', async () => {
  const first = await write(db.sql, 'o-1', 1);
  let e = await eventOf(first);
  assert.equal(e.aggregateId, 'o-1');
  assert.ok(['pending', 'publishing', 'published'].includes(e.outbox.status));

  await writeEvents(db.sql, topic, 10, 5, 50, 'bulk');
  const published = await waitFor('all 51 published', async () => {
    const [r] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_outbox WHERE status = 'published'`;
    return r!.n === 51;
  });
  assert.ok(published);
  e = await eventOf(first);
  const [row] = await db.sql<
    { broker_partition: number; broker_offset: string }[]
  >`SELECT broker_partition, broker_offset::text FROM message_outbox WHERE event_id = ${first}`;
  assert.deepEqual(
    { status: e.outbox.status, partition: e.outbox.partition, offset: e.outbox.offset },
    { status: 'published', partition: row!.broker_partition, offset: row!.broker_offset },
  );
  assert.deepEqual(e.consumers, [], 'no consumer has registered yet');

  consume('api-c', { maxAttempts: 2, baseMs: 2000, capMs: 3000, minDelayMs: 1500 });
  await waitFor(
    '51 applied',
    async () => (await db.sql`SELECT 1 FROM test_applied WHERE consumer = 'api-c'`).length === 51,
  );
  await waitFor('applied state', async () => (await stateOf(first, 'api-c')) === 'applied');
  e = await eventOf(first);
  assert.deepEqual(e.consumers[0], {
    consumer: 'api-c',
    state: 'applied',
    duplicateDeliveries: 0,
    retryAttempt: null,
    nextRetryAt: null,
    failureId: null,
    errorCode: null,
    aggregateVersionApplied: 1,
  });

  // Lag as the broker sees it: committed offsets equal the high watermarks once everything is committed.
  const consumerBacklog = await waitFor('lag 0 in backlog', async () => {
    const b = (await api.gql(BACKLOG, {}, api.tokens.viewer)).data.backlog;
    const c = b.consumers.find((x: { consumer: string }) => x.consumer === 'api-c');
    return c && c.partitions.length === 3 && c.lag === 0 ? c : undefined;
  });
  const committed = await committedOffsets('postbox.api-c', topic);
  for (const p of consumerBacklog.partitions)
    assert.equal(p.committed, committed.get(p.partition), `partition ${p.partition} committed offset`);
  assert.equal(
    consumerBacklog.partitions.reduce((a: number, p: { high: string }) => a + Number(p.high), 0),
    51,
    'high watermarks add up to the records published',
  );
  assert.equal(consumerBacklog.groupId, 'postbox.api-c');

  // A redelivery straight to the topic is absorbed by the inbox and shows as a duplicate.
  await produce(topic, [ceRecord({ aggregate_id: 'o-1', version: 1, event_id: first })]);
  await waitFor('duplicate state', async () => (await stateOf(first, 'api-c')) === 'duplicate');
  assert.equal((await eventOf(first)).consumers[0].duplicateDeliveries, 1);
  const [projection] = await db.sql<
    { applied_count: number }[]
  >`SELECT applied_count FROM demo_order_projection WHERE order_id = 'o-1'`;
  assert.equal(projection!.applied_count, 1, 'the side effect happened once');

  // A failing aggregate: retrying (durable schedule), then failed (budget spent), its successor parked.
  await db.sql`UPDATE test_handler_control SET fail_aggregates = '{o-fail}'`;
  const bad = await write(db.sql, 'o-fail', 1);
  const retrying = await waitFor(
    'retrying state',
    async () => {
      const c = (await eventOf(bad)).consumers.find((x: { consumer: string }) => x.consumer === 'api-c');
      return c?.state === 'retrying' ? c : undefined;
    },
    30_000,
    50,
  );
  assert.equal(retrying.retryAttempt, 2);
  assert.ok(new Date(retrying.nextRetryAt).getTime() > Date.now() - 5000);
  await waitFor('failed state', async () => (await stateOf(bad, 'api-c')) === 'failed', 30_000);
  const next = await write(db.sql, 'o-fail', 2);
  await waitFor('parked state', async () => (await stateOf(next, 'api-c')) === 'parked', 30_000);

  const backlog = (await api.gql(BACKLOG, {}, api.tokens.viewer)).data.backlog;
  const [counts] = await db.sql<{ pending: number; failures: number; parked: number; blocked: number }[]>`
    SELECT (SELECT count(*)::int FROM message_outbox WHERE status IN ('pending', 'publishing')) AS pending,
           (SELECT count(*)::int FROM message_failure WHERE consumer_name = 'api-c' AND status = 'open') AS failures,
           (SELECT count(*)::int FROM message_parked WHERE consumer_name = 'api-c') AS parked,
           (SELECT count(*)::int FROM consumer_blocked_aggregate WHERE consumer_name = 'api-c') AS blocked`;
  const c = backlog.consumers.find((x: { consumer: string }) => x.consumer === 'api-c');
  assert.equal(backlog.outbox.pending + backlog.outbox.publishing, counts!.pending);
  assert.deepEqual(
    { failures: c.failures, parked: c.parked, blocked: c.blockedAggregates },
    { failures: counts!.failures, parked: counts!.parked, blocked: counts!.blocked },
  );
  assert.deepEqual(
    { failures: c.failures, parked: c.parked, blocked: c.blockedAggregates },
    { failures: 1, parked: 1, blocked: 1 },
  );
  assert.equal(backlog.brokerError, null);

  const blocked = await api.gql(
    `{ blockedAggregates(consumer: "api-c") { aggregateId headEventId reason parked } }`,
    {},
    api.tokens.viewer,
  );
  assert.deepEqual(blocked.data.blockedAggregates, [
    { aggregateId: 'o-fail', headEventId: bad, reason: 'failed', parked: 1 },
  ]);

  // Replay: a dry run changes nothing; the real one (after the fix) applies the event once, in order, audited.
  const snapshot = () => db.sql`SELECT
    (SELECT count(*) FROM message_retry WHERE status = 'scheduled') AS retries, (SELECT count(*) FROM message_failure WHERE status = 'open') AS open,
    (SELECT count(*) FROM message_inbox) AS inbox, (SELECT count(*) FROM test_applied) AS applied, (SELECT count(*) FROM message_parked) AS parked`;
  const before = await snapshot();
  const REPLAY = `mutation ($dry: Boolean!) { replayFailures(filter: { consumer: "api-c" }, dryRun: $dry, reason: "downstream fixed") {
    __typename ... on MutationReplayFailuresSuccess { data { dryRun scheduled items { failureId eventId verdict detail } } } ... on Error { code message } } }`;
  const dry = await api.gql(REPLAY, { dry: true }, api.tokens.operator);
  assert.equal(dry.data.replayFailures.data.dryRun, true);
  assert.deepEqual(
    dry.data.replayFailures.data.items.map((i: { eventId: string; verdict: string }) => [i.eventId, i.verdict]),
    [[bad, 'would_apply']],
  );
  assert.deepEqual(await snapshot(), before, 'the dry run changed nothing');

  await db.sql`UPDATE test_handler_control SET fail_aggregates = '{}'`;
  const real = await api.gql(REPLAY, { dry: false }, api.tokens.operator);
  assert.equal(real.data.replayFailures.data.scheduled, 1, JSON.stringify(real));
  await waitFor(
    'replayed and drained',
    async () => (await stateOf(bad, 'api-c')) === 'applied' && (await stateOf(next, 'api-c')) === 'applied',
    30_000,
  );
  const applied = await db.sql<
    { version: number }[]
  >`SELECT version::int FROM test_applied WHERE consumer = 'api-c' AND aggregate_id = 'o-fail' ORDER BY seq`;
  assert.deepEqual(
    applied.map((a) => a.version),
    [1, 2],
    'applied once each, in order',
  );
  const audit = await api.gql(
    `{ auditLog(first: 10, filter: { actor: "test-operator" }) { edges { node { actor action reason outcome target } } } }`,
    {},
    api.tokens.viewer,
  );
  const actions = audit.data.auditLog.edges.map(
    (e: { node: { action: string; outcome: string } }) => `${e.node.action}:${e.node.outcome}`,
  );
  assert.deepEqual(actions.sort(), ['failure.replay.dry_run:ok', 'failure.replay:ok'].sort());
  const [rows] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM operator_audit WHERE actor = 'test-operator' AND action = 'failure.replay' AND target = ${`failure:${dry.data.replayFailures.data.items[0].failureId}`}`;
  assert.equal(rows!.n, 1, 'the replay of that failure is audited in the database');
});

test('skipEvent moves a blocked aggregate past its head and drains what was parked; retryNow brings a retry forward; republish re-sends and consumers absorb it', async () => {
  consume('api-slow', { maxAttempts: 5, baseMs: 60_000, capMs: 60_000, minDelayMs: 60_000 });
  const poisoned = await write(db.sql, 'p-0', 1, { poison: true });
  const behind = await write(db.sql, 'p-0', 2);
  await waitFor(
    'poison failed, successor parked',
    async () => (await stateOf(poisoned, 'api-slow')) === 'failed' && (await stateOf(behind, 'api-slow')) === 'parked',
    60_000,
  );

  const SKIP = `mutation ($e: ID!, $c: String!) { skipEvent(consumer: $c, eventId: $e, reason: "poison pill, accepted loss") {
    __typename ... on MutationSkipEventSuccess { data { skippedVersion resumedEventId auditId } } ... on Error { code message } } }`;
  const refusedNotHead = await api.gql(SKIP, { e: behind, c: 'api-slow' }, api.tokens.admin);
  assert.equal(refusedNotHead.data.skipEvent.__typename, 'NotFoundError', 'a parked event is not a failed head');
  const skipped = await api.gql(SKIP, { e: poisoned, c: 'api-slow' }, api.tokens.admin);
  assert.deepEqual(
    skipped.data.skipEvent.data && {
      v: skipped.data.skipEvent.data.skippedVersion,
      next: skipped.data.skipEvent.data.resumedEventId,
    },
    { v: 1, next: behind },
    JSON.stringify(skipped),
  );
  await waitFor('successor applied', async () => (await stateOf(behind, 'api-slow')) === 'applied', 30_000).catch(
    async (e) => {
      console.log(
        JSON.stringify(
          await db.sql`SELECT consumer_name, event_id, status, attempt, next_attempt_at, last_error FROM message_retry`,
        ),
        JSON.stringify(await db.sql`SELECT * FROM consumer_blocked_aggregate`),
        JSON.stringify(await db.sql`SELECT consumer_name, aggregate_id, aggregate_version FROM message_parked`),
        JSON.stringify(await db.sql`SELECT * FROM consumer_aggregate_version WHERE aggregate_id = 'p-0'`),
      );
      throw e;
    },
  );
  assert.equal(await stateOf(poisoned, 'api-slow'), 'skipped');
  const p0 = await db.sql<
    { version: number }[]
  >`SELECT version::int FROM test_applied WHERE consumer = 'api-slow' AND aggregate_id = 'p-0' ORDER BY seq`;
  assert.deepEqual(
    p0.map((r) => r.version),
    [2],
    'v1 skipped (no effect), v2 applied once',
  );
  const [audit] = await db.sql<
    { actor: string; reason: string }[]
  >`SELECT actor, reason FROM operator_audit WHERE action = 'event.skip' AND outcome = 'ok'`;
  assert.deepEqual({ ...audit }, { actor: 'test-admin', reason: 'poison pill, accepted loss' });

  await db.sql`UPDATE test_handler_control SET fail_aggregates = '{s-1}'`;
  const slow = await write(db.sql, 's-1', 1);
  const waiting = await waitFor(
    'retry scheduled a minute out',
    async () => {
      const c = (await eventOf(slow)).consumers.find((x: { consumer: string }) => x.consumer === 'api-slow');
      return c?.state === 'retrying' ? c : undefined;
    },
    30_000,
  );
  assert.ok(new Date(waiting.nextRetryAt).getTime() - Date.now() > 30_000, 'the backoff put it a minute out');
  await db.sql`UPDATE test_handler_control SET fail_aggregates = '{}'`;
  const now = await api.gql(
    `mutation ($e: ID!) { retryNow(consumer: "api-slow", eventId: $e, reason: "downstream is back") { __typename ... on MutationRetryNowSuccess { data { attempt } } } }`,
    { e: slow },
    api.tokens.operator,
  );
  assert.equal(now.data.retryNow.data.attempt, 2, JSON.stringify(now));
  await waitFor('applied long before the backoff', async () => (await stateOf(slow, 'api-slow')) === 'applied', 20_000);

  const republished = await api.gql(
    `mutation { republish(aggregateId: "s-1", fromVersion: 1, reason: "back-fill test") { __typename ... on MutationRepublishSuccess { data { requeuedVersions } } ... on Error { code } } }`,
    {},
    api.tokens.operator,
  );
  assert.deepEqual(republished.data.republish.data.requeuedVersions, [1]);
  await waitFor('redelivery absorbed', async () => (await stateOf(slow, 'api-slow')) === 'duplicate', 30_000);
  const [effects] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM test_applied WHERE consumer = 'api-slow' AND aggregate_id = 's-1'`;
  assert.equal(effects!.n, 1, 'republished, still applied once');
  const nothing = await api.gql(
    `mutation { republish(aggregateId: "no-such", fromVersion: 1, reason: "x") { __typename ... on Error { code message } } }`,
    {},
    api.tokens.operator,
  );
  assert.equal(nothing.data.republish.__typename, 'NotFoundError');
  const [refused] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM operator_audit WHERE action = 'outbox.republish' AND outcome = 'refused' AND actor = 'test-operator'`;
  assert.equal(refused!.n, 1, 'the refusal is audited too');
});

test('failures paginate stably (keyset) while new failures arrive', async () => {
  for (let i = 0; i < 25; i++) await write(db.sql, `pg-${i}`, 1, { poison: true });
  await waitFor(
    '25 failures',
    async () =>
      (await db.sql`SELECT 1 FROM message_failure WHERE consumer_name = 'api-c' AND aggregate_id LIKE 'pg-%'`)
        .length === 25,
    60_000,
  );
  const expected = (
    await db.sql<
      { id: number }[]
    >`SELECT failure_id::int AS id FROM message_failure WHERE consumer_name = 'api-c' AND status = 'open' ORDER BY failure_id DESC`
  ).map((r) => r.id);
  const PAGE = `query ($after: String) { failures(first: 10, after: $after, filter: { consumer: "api-c" }) {
    edges { cursor node { id aggregateId errorCode } } pageInfo { hasNextPage endCursor } } }`;
  const seen: number[] = [];
  let after: string | null = null;
  let pages = 0;
  for (;;) {
    const r: { data: any; errors?: unknown } = await api.gql(PAGE, { after }, api.tokens.viewer);
    assert.equal(r.errors, undefined, JSON.stringify(r.errors));
    const conn = r.data.failures;
    seen.push(...conn.edges.map((e: { node: { id: number } }) => e.node.id));
    pages++;
    if (pages === 1) {
      // A new failure between pages lands before the first page; later pages neither repeat nor skip.
      await write(db.sql, 'pg-late', 1, { poison: true });
      await waitFor(
        'the late failure',
        async () =>
          (await db.sql`SELECT 1 FROM message_failure WHERE consumer_name = 'api-c' AND aggregate_id = 'pg-late'`)
            .length === 1,
        30_000,
      );
    }
    if (!conn.pageInfo.hasNextPage) break;
    after = conn.pageInfo.endCursor;
  }
  assert.deepEqual(seen, expected);
  assert.equal(pages, Math.ceil(expected.length / 10));
  const payloadDenied = await api.gql(
    `{ failures(first: 1) { edges { node { id payload } } } }`,
    {},
    api.tokens.viewer,
  );
  assert.equal(payloadDenied.errors?.[0]?.extensions?.code, 'FORBIDDEN', 'payloads need the payload scope');
  const payload = await api.gql(
    `{ failures(first: 1, filter: { consumer: "api-c" }) { edges { node { id payload } } } }`,
    {},
    api.tokens.payload,
  );
  assert.equal(JSON.parse(Buffer.from(payload.data.failures.edges[0].node.payload, 'base64').toString()).poison, true);
});

test('the backlog subscription streams over server-sent events at the chosen interval', async () => {
  const controller = new AbortController();
  const res = await fetch(api.url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'text/event-stream',
      authorization: `Bearer ${api.tokens.viewer}`,
    },
    body: JSON.stringify({ query: 'subscription { backlog(intervalMs: 1000) { at outbox { pending failed } } }' }),
    signal: controller.signal,
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
  const reader = res.body!.getReader();
  const events: Array<{ data: { backlog: { at: string } } }> = [];
  let buffer = '';
  while (events.length < 2) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += Buffer.from(value).toString();
    for (let i; (i = buffer.indexOf('\n\n')) >= 0; ) {
      const chunk = buffer.slice(0, i);
      buffer = buffer.slice(i + 2);
      const data = chunk.split('\n').find((l) => l.startsWith('data:'));
      if (data && chunk.includes('event: next')) events.push(JSON.parse(data.slice(5)));
    }
  }
  controller.abort();
  assert.equal(events.length, 2);
  const gap = new Date(events[1]!.data.backlog.at).getTime() - new Date(events[0]!.data.backlog.at).getTime();
  assert.ok(gap >= 900, `events ${gap} ms apart`);
});
