import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { applyRoles, connect, type Envelope } from '@postbox/engine';
import { classify } from '@postbox/engine/runtime';
import { participant } from '@postbox/engine/saga';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { stack } from '../support/stack.ts';

// Two deliveries of one step's command at once (two event ids of the same step and attempt, handled by two
// consumer transactions together): the step is applied once, the second delivery waits for the first's record and
// answers from it, and neither fails (a unique violation on the step record was a permanent failure that blocked
// the command's aggregate).
let db: TestDatabase;

before(async () => {
  db = await freshDatabase();
  await db.sql`CREATE TABLE test_reservation (id bigserial PRIMARY KEY, order_id text NOT NULL)`;
});
after(async () => {
  await db.drop();
});

const inventory = participant({
  name: 'inventory',
  apply: async (cmd, tx) => {
    const { orderId } = cmd.data as { orderId: string };
    await tx`INSERT INTO test_reservation (order_id) VALUES (${orderId})`;
    // Long enough for the other delivery to look for the step record before this one writes it.
    await tx`SELECT pg_sleep(0.3)`;
    return { applied: true, type: 'inventory.reserved', data: { id: `r-${orderId}` } };
  },
});

function command(sagaId: string): Envelope {
  return {
    event_id: randomUUID(),
    event_type: 'inventory.reserve',
    aggregate_id: `saga:${sagaId}:reserve`,
    aggregate_version: 1,
    data: { orderId: 'o-1' },
    extensions: {
      sagaid: sagaId,
      sagatype: 'dup-order',
      sagastep: 'reserve',
      sagadirection: 'forward',
      sagaattempt: '1',
      idempotencykey: `${sagaId}:reserve`,
      replyto: 'dup.replies',
    },
  } as unknown as Envelope;
}

test('two concurrent deliveries of one step command: one effect, one reply, no failure', async () => {
  const sagaId = randomUUID();
  const errors: unknown[] = [];
  await Promise.all(
    [command(sagaId), command(sagaId)].map((event, i) =>
      db.sql
        .begin((tx) => inventory(event, tx, { consumer: 'inventory', partition: 0, offset: String(i), attempt: 1 }))
        .catch((e: unknown) => {
          errors.push(e);
        }),
    ),
  );
  assert.deepEqual(
    errors.map((e) => `${classify(e).kind} ${classify(e).code}: ${(e as Error).message}`),
    [],
    'neither delivery failed',
  );
  const [effects] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM test_reservation`;
  assert.equal(effects!.n, 1, 'the step applied once');
  const records = await db.sql<{ status: string }[]>`
    SELECT status FROM saga_participation WHERE step_key = ${`${sagaId}:reserve`}`;
  assert.deepEqual(
    records.map((r) => r.status),
    ['applied'],
  );
  const replies = await db.sql<{ event_type: string }[]>`
    SELECT event_type FROM message_outbox WHERE aggregate_id = ${`saga:${sagaId}:reserve:forward`}`;
  assert.deepEqual(
    replies.map((r) => r.event_type),
    ['inventory.reserved'],
    'one reply',
  );
});

test('a repeated command answered from the step record, as the consumer role: no second reply, no failure', async () => {
  // The participant runs in `postbox consume`, connected as postbox_consumer: it may read the outbox's key
  // registry to see its reply is written already, not the outbox's own columns.
  await applyRoles(db.sql);
  const login = `pbx_participant_${randomUUID().slice(0, 8)}`;
  await db.sql.unsafe(`CREATE ROLE ${login} LOGIN PASSWORD 'pw' IN ROLE postbox_consumer;
    GRANT SELECT, INSERT ON test_reservation TO postbox_consumer;
    GRANT USAGE ON SEQUENCE test_reservation_id_seq TO postbox_consumer`);
  const url = new URL(db.url);
  url.username = login;
  url.password = 'pw';
  const asConsumer = connect({ url: url.toString(), max: 1 });
  try {
    const sagaId = randomUUID();
    for (const [i, event] of [command(sagaId), command(sagaId)].entries())
      await asConsumer.begin((tx) =>
        inventory(event, tx, { consumer: 'inventory', partition: 0, offset: String(i), attempt: 1 }),
      );
    const replies = await db.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM message_outbox WHERE aggregate_id = ${`saga:${sagaId}:reserve:forward`}`;
    assert.equal(replies[0]!.n, 1, 'one reply for two deliveries');
  } finally {
    await asConsumer.end({ timeout: 5 });
    const admin = connect({ url: stack.DATABASE_URL, max: 1 });
    await db.sql.unsafe(`REVOKE ALL ON test_reservation FROM postbox_consumer;
      REVOKE ALL ON SEQUENCE test_reservation_id_seq FROM postbox_consumer`);
    await admin.unsafe(`DROP OWNED BY ${login}; DROP ROLE IF EXISTS ${login}`).catch(() => {});
    await admin.end({ timeout: 5 });
  }
});
