import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { startTestApi, type TestApi } from '../support/api.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';

// Limits that hold whatever the client's framing or spelling: a body sent in chunks (no Content-Length) is cut off
// at the limit like a declared one; the mutation rate counts mutation fields, so aliases cannot run N for one; a
// read of a payload-scoped field without the scope is refused and audited.

let db: TestDatabase;
let api: TestApi;

before(async () => {
  db = await freshDatabase();
  api = await startTestApi(db.url, { config: { maxBodyBytes: 4096 } });
});

after(async () => {
  await api.close();
  await db.drop();
});

/** POSTs `parts` as a chunked body (Transfer-Encoding: chunked, no Content-Length). */
function chunked(url: string, token: string, parts: string[]): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      },
      (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    // The server may answer and stop reading before the last chunk: a reset then is the refusal itself.
    req.on('error', (error) => (req.destroyed ? undefined : reject(error)));
    for (const part of parts) req.write(part);
    req.end();
  });
}

test('a chunked body over the limit is refused with 413; one under it runs', async () => {
  const query = JSON.stringify({ query: `{ health { ready } } # ${'x'.repeat(20_000)}` });
  const parts = query.match(/[\s\S]{1,1000}/g)!;
  const over = await chunked(api.url, api.tokens.viewer, parts);
  assert.equal(over.status, 413, over.body.slice(0, 200));
  assert.match(over.body, /over the limit of 4096/);
  assert.match(over.body, /PAYLOAD_TOO_LARGE/);

  const small = await chunked(api.url, api.tokens.viewer, ['{"query":', '"{ health { ready } }"}']);
  assert.equal(small.status, 200, small.body);
  assert.equal(JSON.parse(small.body).data.health.ready, true);
});

test('the mutation rate counts mutation fields: aliases are N mutations, not one', async () => {
  const limited = await startTestApi(db.url, { config: { mutationsPerMinute: 5 } });
  try {
    const mutation = (n: number, from: number) =>
      `mutation { ${Array.from(
        { length: n },
        (_, i) =>
          `a${from + i}: retryNow(consumer: "nobody", eventId: "01900000-0000-7000-8000-00000000000${i}") { __typename }`,
      ).join(' ')} }`;
    const refusals = async () =>
      (
        await db.sql<
          { n: number }[]
        >`SELECT count(*)::int AS n FROM operator_audit WHERE action = 'retry.now' AND outcome = 'refused'`
      )[0]!.n;
    const before = await refusals();

    const six = await limited.post(JSON.stringify({ query: mutation(6, 0) }), limited.tokens.operator);
    assert.equal(six.json.errors?.[0]?.extensions?.code, 'RATE_LIMITED', JSON.stringify(six.json).slice(0, 300));
    assert.equal(six.status, 429);
    assert.match(six.json.errors[0].message, /6 mutations in one operation, more than the 5 a minute/);
    assert.equal(await refusals(), before, 'none of the six ran');

    const three = await limited.post(JSON.stringify({ query: mutation(3, 0) }), limited.tokens.operator);
    assert.equal(three.json.errors, undefined, JSON.stringify(three.json));
    assert.equal(await refusals(), before + 3, 'three ran (each refused: no such consumer)');
    const threeMore = await limited.post(JSON.stringify({ query: mutation(3, 3) }), limited.tokens.operator);
    assert.equal(threeMore.json.errors?.[0]?.extensions?.code, 'RATE_LIMITED', '3 + 3 is over 5 a minute');
    assert.equal(await refusals(), before + 3, 'the second three did not run');
    const two = await limited.post(JSON.stringify({ query: mutation(2, 3) }), limited.tokens.operator);
    assert.equal(two.json.errors, undefined, '3 + 2 is within 5 a minute');
    assert.equal(await refusals(), before + 5);
  } finally {
    await limited.close();
  }
});

test('a refused read of a payload-scoped field is audited with the caller and the row', async () => {
  const [row] = await db.sql<{ id: number }[]>`
    INSERT INTO message_failure (consumer_name, event_id, topic, broker_partition, broker_offset, payload, headers,
                                 error_code, error_detail, attempts, first_failed_at, last_failed_at)
    VALUES ('limits-c', gen_random_uuid(), 't', 0, 7, '\\x7b7d', '{}', 'handler_error', 'boom', 1, now(), now())
    RETURNING failure_id::int AS id`;
  const QUERY = '{ failures(first: 5, filter: { consumer: "limits-c" }) { edges { node { id payload } } } }';
  const denied = async (actor: string) =>
    db.sql<{ action: string; target: string | null; after: any }[]>`
      SELECT action, target, after FROM operator_audit WHERE actor = ${actor} AND outcome = 'denied'`;

  const viewer = await api.gql(QUERY, {}, api.tokens.viewer);
  assert.equal(viewer.errors?.[0]?.extensions?.code, 'FORBIDDEN', JSON.stringify(viewer));
  const rows = await denied('test-viewer');
  assert.equal(rows.length, 1, JSON.stringify(rows));
  assert.equal(rows[0]!.action, 'read:Failure.payload');
  assert.equal(rows[0]!.target, `failure:${row!.id}`);

  const allowed = await api.gql(QUERY, {}, api.tokens.payload);
  assert.equal(allowed.errors, undefined, JSON.stringify(allowed.errors));
  assert.equal(allowed.data.failures.edges[0].node.payload, Buffer.from('{}').toString('base64'));
  assert.equal((await denied('test-payload')).length, 0, 'an allowed read writes no denial');
});
