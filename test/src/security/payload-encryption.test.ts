import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { generatePayloadKey } from '@postbox/engine';
import { startTestApi, type TestApi } from '../support/api.ts';
import { ceRecord, createHandlerTables, produce, TEST_CONSUMER_MODULE } from '../support/consumer.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// Payload encryption at rest (issue 24): with POSTBOX_PAYLOAD_KEYS set, what the failure store and the retry ledger
// keep of an event is sealed (AES-256-GCM, the key's id on the row) and nothing of it stays in clear; the retry
// ledger's records open again for their retries; GraphQL decrypts for the payload scope only; `postbox keys
// rotate` re-seals every row under the ring's new first key; a key missing from the ring is an error naming it.
let db: TestDatabase;
const topic = uniqueTopic('sealed');
const CONSUMER = 'sealed';
const K1 = generatePayloadKey('k1');
const K2 = generatePayloadKey('k2');
const SECRET = 'card-4111-1111-1111-1111';

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 2);
  await createHandlerTables(db.sql);
});

after(async () => {
  await db.drop();
});

function consume(keys: string): RoleProcess {
  return spawnPostbox(['consume', TEST_CONSUMER_MODULE], {
    DATABASE_URL: db.url,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
    REDIS_URL: stack.REDIS_URL,
    TEST_TOPIC: topic,
    TEST_CONSUMER: CONSUMER,
    TEST_RETRY: JSON.stringify({ maxAttempts: 3, baseMs: 100, capMs: 200 }),
    POSTBOX_PAYLOAD_KEYS: keys,
    LOG_LEVEL: 'warn',
  });
}

async function run(args: string[], keys: string): Promise<{ code: number | null; out: string }> {
  const p = spawnPostbox(args, {
    DATABASE_URL: db.url,
    REDIS_URL: stack.REDIS_URL,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
    POSTBOX_PAYLOAD_KEYS: keys,
  });
  return { code: await p.exited, out: p.output() };
}

async function stop(p: RoleProcess): Promise<void> {
  p.kill('SIGTERM');
  assert.equal(await p.exited, 0, p.output().slice(-3000));
}

interface StoredFailure {
  failure_id: number;
  aggregate_id: string;
  error_code: string;
  payload: Buffer | null;
  headers: unknown;
  envelope: unknown;
  key_id: string | null;
  sealed: Buffer | null;
}

const storedFailures = () => db.sql<StoredFailure[]>`
  SELECT failure_id::int, aggregate_id, error_code, payload, headers, envelope, key_id, sealed
  FROM message_failure WHERE consumer_name = ${CONSUMER} ORDER BY aggregate_id`;

async function withApi<T>(keys: string | null, body: (api: TestApi) => Promise<T>): Promise<T> {
  const api = await startTestApi(db.url, keys ? { env: { POSTBOX_PAYLOAD_KEYS: keys } } : {});
  try {
    return await body(api);
  } finally {
    await api.close();
  }
}

/** The poison event's failure through GraphQL, as the token may see it. */
async function poisonFailure(api: TestApi, token: string) {
  const res = await api.gql(
    `{ failures(filter: { consumer: "${CONSUMER}", errorCode: "test_poison" }) { edges { node { id encryptedWith payload } } } }`,
    {},
    token,
  );
  return { node: res.data?.failures?.edges[0]?.node ?? null, errors: res.errors };
}

test('failures and retries are stored sealed, open for retries, and decrypt for the payload scope only', async () => {
  const poison = ceRecord({ aggregate_id: 'poison-1', version: 1, data: { poison: true, secret: SECRET } });
  await produce(topic, [
    poison,
    ceRecord({ aggregate_id: 'flaky-1', version: 1, data: { failAttempts: 1, secret: SECRET } }),
    ceRecord({ aggregate_id: 'broken-1', version: 1, data: { failAttempts: 99, secret: SECRET } }),
  ]);
  const consumer = consume(K1);
  try {
    await waitFor('poison stored, flaky applied by its retry, broken exhausted', async () => {
      const [row] = await db.sql<{ failures: number; applied: number }[]>`
        SELECT (SELECT count(*)::int FROM message_failure WHERE consumer_name = ${CONSUMER}) AS failures,
               (SELECT count(*)::int FROM test_applied WHERE consumer = ${CONSUMER} AND aggregate_id = 'flaky-1') AS applied`;
      return row!.failures === 2 && row!.applied === 1;
    });
  } finally {
    await stop(consumer);
  }

  const failures = await storedFailures();
  assert.deepEqual(
    failures.map((f) => [f.aggregate_id, f.error_code, f.key_id]),
    [
      ['broken-1', 'error', 'k1'],
      ['poison-1', 'test_poison', 'k1'],
    ],
  );
  for (const f of failures) {
    assert.deepEqual([f.payload, f.headers, f.envelope], [null, null, null], 'nothing of the event in clear');
    assert.ok(f.sealed && f.sealed.length > 0);
    assert.equal(f.sealed.indexOf(SECRET), -1, 'the secret is not in the sealed bytes');
  }
  const stored = failures.find((f) => f.aggregate_id === 'poison-1')!;
  console.log(
    `# stored: payload=${stored.payload} headers=${stored.headers} envelope=${stored.envelope} key_id=${stored.key_id} sealed=\\x${stored.sealed!.subarray(0, 24).toString('hex')}… (${stored.sealed!.length} bytes)`,
  );
  const ledger = await db.sql<
    { aggregate_id: string; status: string; record: unknown; key_id: string; sealed: Buffer }[]
  >`
    SELECT aggregate_id, status, record, key_id, sealed FROM message_retry WHERE consumer_name = ${CONSUMER} ORDER BY aggregate_id`;
  assert.deepEqual(
    ledger.map((r) => [r.aggregate_id, r.status, r.record, r.key_id]),
    [
      ['broken-1', 'exhausted', null, 'k1'],
      ['flaky-1', 'done', null, 'k1'],
    ],
    'the ledger keeps its records sealed; the retries opened them (flaky-1 applied, broken-1 ran out)',
  );
  assert.ok(ledger.every((r) => r.sealed.indexOf(SECRET) === -1));

  const poisonId = failures.find((f) => f.aggregate_id === 'poison-1')!.failure_id;
  await withApi(K1, async (api) => {
    const withScope = await poisonFailure(api, api.tokens.payload);
    assert.equal(withScope.errors, undefined, JSON.stringify(withScope.errors));
    assert.equal(withScope.node.id, poisonId);
    assert.equal(withScope.node.encryptedWith, 'k1');
    assert.deepEqual(Buffer.from(withScope.node.payload, 'base64'), poison.value, 'the bytes as received');
    const viewer = await poisonFailure(api, api.tokens.viewer);
    assert.deepEqual([viewer.node.encryptedWith, viewer.node.payload], ['k1', null], 'metadata only');
    assert.match(viewer.errors![0]!.message, /not allowed: Failure\.payload/);
    console.log(`# read with the payload scope: ${JSON.stringify(withScope.node)} = ${poison.value!.toString()}`);
    console.log(`# read without it: ${JSON.stringify(viewer.node)}; error: ${viewer.errors![0]!.message}`);
  });
  await withApi(null, async (api) => {
    const res = await poisonFailure(api, api.tokens.payload);
    assert.equal(res.node.payload, null);
    assert.equal(res.errors?.[0]?.extensions?.code, 'PAYLOAD_KEY_MISSING');
    assert.match(
      res.errors![0]!.message,
      /encrypted with key "k1", which cannot be read: POSTBOX_PAYLOAD_KEYS is not set/,
    );
  });
});

test('postbox keys rotate re-seals every row under the new first key; the old key may then go', async () => {
  const rotate = await run(['keys', 'rotate', '--batch', '1'], `${K2},${K1}`);
  assert.equal(rotate.code, 0, rotate.out);
  assert.match(rotate.out, /message_failure: 1\/2 sealed with "k2"\nmessage_failure: 2\/2 sealed with "k2"/);
  assert.match(rotate.out, /message_retry: 2\/2 sealed with "k2"/);
  assert.match(rotate.out, /sealed with "k2": message_failure 2 row\(s\), message_retry 2 row\(s\)/);
  const [keys] = await db.sql<{ failures: string[]; retries: string[] }[]>`
    SELECT (SELECT array_agg(DISTINCT key_id) FROM message_failure) AS failures,
           (SELECT array_agg(DISTINCT key_id) FROM message_retry) AS retries`;
  assert.deepEqual(keys, { failures: ['k2'], retries: ['k2'] });
  const [audit] = await db.sql<{ after: { primary: string; failures: number } }[]>`
    SELECT after FROM operator_audit WHERE action = 'keys.rotate'`;
  assert.deepEqual([audit!.after.primary, audit!.after.failures], ['k2', 2]);
  const again = await run(['keys', 'rotate'], `${K2},${K1}`);
  assert.match(again.out, /message_failure 0 row\(s\), message_retry 0 row\(s\)/, 'a second run finds nothing to do');
  const status = await run(['keys', 'status'], K2);
  assert.match(status.out, /message_failure\s+k2\s+2\nmessage_retry\s+k2\s+2/);

  const [poison] = (await storedFailures()).filter((f) => f.aggregate_id === 'poison-1');
  await withApi(K2, async (api) => {
    const res = await poisonFailure(api, api.tokens.payload);
    assert.match(Buffer.from(res.node.payload, 'base64').toString(), new RegExp(SECRET), 'k2 alone opens it');
  });
  await withApi(K1, async (api) => {
    const res = await poisonFailure(api, api.tokens.payload);
    assert.match(res.errors![0]!.message, /encrypted with key "k2", which the key ring \(k1\) does not hold/);
  });
  const show = await run(['failures', 'show', String(poison!.failure_id)], K1);
  assert.equal(show.code, 1);
  assert.match(show.out, /"encrypted_with": "k2"[\s\S]*postbox failures show: .*encrypted with key "k2"/);
});

test('an altered sealed row is an error, never garbage; a sealed failure replays and applies', async () => {
  const [poison] = (await storedFailures()).filter((f) => f.aggregate_id === 'poison-1');
  const [broken] = (await storedFailures()).filter((f) => f.aggregate_id === 'broken-1');
  // Another row's sealed bytes: the seal is bound to its row.
  await db.sql`UPDATE message_failure SET sealed = ${poison!.sealed} WHERE failure_id = ${broken!.failure_id}`;
  const dry = await run(
    ['failures', 'replay', '--id', String(broken!.failure_id), '--reason', 'check', '--dry-run'],
    K2,
  );
  assert.match(dry.out, /not_replayable.*does not authenticate under key "k2"/);

  const replay = await run(
    ['failures', 'replay', '--id', String(poison!.failure_id), '--reason', 'fixed', '--data', `{"secret":"${SECRET}"}`],
    K2,
  );
  assert.equal(replay.code, 0, replay.out);
  const consumer = consume(K2);
  try {
    await waitFor('the replayed event applied', async () => {
      const [row] = await db.sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM test_applied WHERE consumer = ${CONSUMER} AND aggregate_id = 'poison-1'`;
      return row!.n === 1;
    });
  } finally {
    await stop(consumer);
  }
  const [row] = await db.sql<{ record: unknown; key_id: string }[]>`
    SELECT r.record, r.key_id FROM message_retry r JOIN message_failure f ON f.consumer_name = r.consumer_name
    WHERE f.failure_id = ${poison!.failure_id} AND r.aggregate_id = 'poison-1'`;
  assert.deepEqual(row, { record: null, key_id: 'k2' }, 'the replay wrote its ledger row sealed');
});
