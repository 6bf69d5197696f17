import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import {
  apiToken,
  createApiResources,
  readConfig,
  startControlPlane,
  type ApiResources,
  type ControlPlane,
} from '@postbox/api';
import { newEventId } from '@postbox/engine';
import { registerConsumer } from '@postbox/engine/runtime';
import { scheduleRetry } from '@postbox/engine/testing';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// retryNow and skipEvent name a consumer; the control plane opens a retry scheduler (a Redis connection) per
// consumer. A name no consumer registered is refused before any scheduler exists, and schedulers that sit idle are
// closed, so callers cannot grow the API's Redis connections. A private Redis: CLIENT LIST is this test's alone.

let db: TestDatabase;
let redis: PrivateStack;
let raw: Redis;
let resources: ApiResources;
let plane: ControlPlane;
const operator = `operator-${randomBytes(16).toString('hex')}`;
const admin = `admin-${randomBytes(16).toString('hex')}`;

before(async () => {
  [db, redis] = await Promise.all([freshDatabase(), startPrivateStack({ redis: true })]);
  raw = new Redis(redis.urls.REDIS_URL!, { maxRetriesPerRequest: 1 });
  resources = createApiResources(
    readConfig(
      { ...stack, DATABASE_URL: db.url, REDIS_URL: redis.urls.REDIS_URL! },
      { POSTBOX_TOPICS: 'api.unused:1' },
    ),
    { schedulers: { idleMs: 300 } },
  );
  plane = await startControlPlane(
    {
      host: '127.0.0.1',
      port: 0,
      production: true,
      tokens: [apiToken('test-operator', ['operator'], operator), apiToken('test-admin', ['admin'], admin)],
      devToken: null,
      maxBodyBytes: 65_536,
      mutationsPerMinute: 1_000_000,
    },
    resources.deps,
  );
});

after(async () => {
  await plane?.close();
  await resources?.close();
  raw?.disconnect();
  await redis?.stop();
  await db?.drop();
});

/** Connections to the private Redis other than this test's own. */
async function apiConnections(): Promise<number> {
  const list = (await raw.client('LIST')) as string;
  return list.split('\n').filter((l) => l.trim() !== '').length - 1;
}

async function gql(query: string, variables: Record<string, unknown>, token: string) {
  const res = await fetch(plane.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  return (await res.json()) as { data?: any; errors?: unknown[] };
}

const RETRY_NOW = `mutation ($c: String!, $e: ID!) { retryNow(consumer: $c, eventId: $e) {
  __typename ... on Error { code message } ... on MutationRetryNowSuccess { data { attempt } } } }`;
const SKIP = `mutation ($c: String!, $e: ID!) { skipEvent(consumer: $c, eventId: $e, reason: "probe") {
  __typename ... on Error { code message } } }`;

test('retryNow and skipEvent for made-up consumers are refused and open no Redis connection', async () => {
  // The readiness probe's connection is part of the baseline.
  const health = await gql('{ health { checks { name ok } } }', {}, operator);
  assert.deepEqual(
    health.data?.health.checks.find((c: { name: string }) => c.name === 'redis'),
    { name: 'redis', ok: true },
  );
  const baseline = await apiConnections();
  for (let i = 0; i < 40; i++) {
    const consumer = `nobody-${randomBytes(6).toString('hex')}`;
    const r =
      i % 2 === 0
        ? (await gql(RETRY_NOW, { c: consumer, e: newEventId() }, operator)).data?.retryNow
        : (await gql(SKIP, { c: consumer, e: newEventId() }, admin)).data?.skipEvent;
    assert.equal(r?.__typename, 'NotFoundError', JSON.stringify(r));
    assert.match(r.message, new RegExp(`consumer ${consumer} .*not found`), r.message);
  }
  assert.equal(await apiConnections(), baseline, 'no Redis connection was opened for a made-up consumer');
  const [refused] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM operator_audit WHERE outcome = 'refused' AND action IN ('retry.now', 'event.skip')`;
  assert.equal(refused!.n, 40, 'every refusal is audited');

  // A registered consumer with a scheduled retry gets its scheduler; idle, it is closed again.
  await registerConsumer(db.sql, { name: 'conn-c', groupId: 'postbox.conn-c', topics: ['t'] });
  const eventId = newEventId();
  await scheduleRetry(db.sql, {
    consumer: 'conn-c',
    eventId,
    aggregateId: 'a-1',
    aggregateVersion: 1,
    topic: 't',
    record: { topic: 't', partition: 0, offset: '0', key: 'a-1', value: null, headers: {} },
    attempt: 2,
    delayMs: 600_000,
    deadline: null,
    errorCode: 'error',
    error: 'downstream 503',
  });
  const now = (await gql(RETRY_NOW, { c: 'conn-c', e: eventId }, operator)).data?.retryNow;
  assert.equal(now?.data?.attempt, 2, JSON.stringify(now));
  assert.ok((await apiConnections()) > baseline, 'the scheduler of a real consumer connected');
  await waitFor('the idle scheduler to close', async () => (await apiConnections()) === baseline, 10_000, 50);
});
