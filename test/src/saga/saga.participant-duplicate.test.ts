import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import type { Envelope } from '@postbox/engine';
import { classify } from '@postbox/engine/runtime';
import { participant } from '@postbox/engine/saga';
import { freshDatabase, type TestDatabase } from '../support/database.ts';

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
