import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ConfigError, type Envelope, type Sql } from '@postbox/engine';
import {
  defineSaga,
  participant,
  type SagaInput,
  REPLY,
  SagaOrchestrator,
  SagaTimerRunner,
  sagaHistory,
  sagaReplyHandler,
  readSaga,
} from '@postbox/engine/saga';
import { freshDatabase, type TestDatabase } from '../support/database.ts';

// The saga layer straight on PostgreSQL, no broker: commands and replies are taken from the outbox as the relay
// would publish them and handed to the participants' and the orchestrator's handlers in transactions, as the
// consumers would run them. What is checked is the database: saga rows, history, participation records, outbox.
let db: TestDatabase;

interface Order {
  orderId: string;
  amount: number;
  reservation?: string;
}

const orderInput: SagaInput<Order> = {
  type: 'order-fulfilment',
  version: 1,
  steps: [
    {
      name: 'reserve',
      topic: 'inventory.commands',
      command: (d) => ({ type: 'inventory.reserve', data: { orderId: d.orderId } }),
      success: ['inventory.reserved'],
      failure: ['inventory.out_of_stock'],
      onSuccess: (d, r) => ({ ...d, reservation: (r as { id: string }).id }),
      compensate: (d) => ({ type: 'inventory.release', data: { reservation: d.reservation } }),
    },
    {
      name: 'charge',
      topic: 'payments.commands',
      command: (d) => ({ type: 'payments.charge', data: { orderId: d.orderId, amount: d.amount } }),
      success: ['payments.charged'],
      failure: ['payments.declined'],
      compensate: (d) => ({ type: 'payments.refund', data: { orderId: d.orderId } }),
    },
    {
      name: 'ship',
      topic: 'shipping.commands',
      command: (d) => ({ type: 'shipping.ship', data: { orderId: d.orderId } }),
      success: ['shipping.shipped'],
      failure: ['shipping.refused'],
      pivot: true,
    },
  ],
};
const order = defineSaga<Order>(orderInput);
const sagas = new SagaOrchestrator([order]);
const onReply = sagaReplyHandler(sagas);

// Participants: inventory reserves (and releases), payments declines amounts over 1000, shipping ships.
const effects: string[] = [];
const inventory = participant({
  name: 'inventory',
  apply: async (cmd) => {
    effects.push(`reserve ${(cmd.data as Order).orderId}`);
    return { applied: true, type: 'inventory.reserved', data: { id: `r-${(cmd.data as Order).orderId}` } };
  },
  compensate: async (_cmd, _tx, applied) => {
    effects.push(`release ${(applied as { id: string }).id}`);
    return 'compensated';
  },
});
const payments = participant({
  name: 'payments',
  apply: async (cmd) => {
    const { amount, orderId } = cmd.data as Order;
    if (amount > 1000) return { applied: false, type: 'payments.declined', data: { reason: 'limit' } };
    effects.push(`charge ${orderId}`);
    return { applied: true, type: 'payments.charged' };
  },
});
const shipping = participant({ name: 'shipping', apply: async () => ({ applied: true, type: 'shipping.shipped' }) });
const byTopic: Record<string, typeof inventory> = {
  'inventory.commands': inventory,
  'payments.commands': payments,
  'shipping.commands': shipping,
};

before(async () => {
  db = await freshDatabase();
});
after(async () => {
  await db.drop();
});

interface OutboxEvent {
  envelope: Envelope;
  topic: string;
}

/** Outbox rows not yet taken, in order, as the consumer's parse would give them (marked taken). */
async function take(sql: Sql, where: 'commands' | 'replies'): Promise<OutboxEvent[]> {
  const rows = await sql<
    Array<{
      event_id: string;
      event_type: string;
      aggregate_id: string;
      aggregate_version: string;
      topic: string;
      payload: Buffer;
      extensions: Record<string, string> | null;
      occurred_at: Date;
      producer: string;
    }>
  >`
    UPDATE message_outbox SET status = 'published', published_at = now()
    WHERE status = 'pending' AND (${where === 'replies'} = (topic LIKE 'postbox.saga.%'))
    RETURNING event_id, event_type, aggregate_id, aggregate_version::text, topic, payload, extensions, occurred_at, producer`;
  return rows
    .sort((a, b) => a.occurred_at.getTime() - b.occurred_at.getTime())
    .map((r) => ({
      topic: r.topic,
      envelope: {
        event_id: r.event_id,
        event_type: r.event_type,
        schema_version: 1,
        aggregate_id: r.aggregate_id,
        aggregate_version: Number(r.aggregate_version),
        occurred_at: r.occurred_at.toISOString(),
        producer: r.producer,
        data: JSON.parse(r.payload.toString('utf8')),
        ...(r.extensions ? { extensions: r.extensions } : {}),
      } as Envelope,
    }));
}

const context = { consumer: 'test', partition: 0, offset: '0', attempt: 1 };

/** Delivers every pending command to its participant, then every reply to the orchestrator, until quiet. */
async function pump(options: { dropReplies?: boolean } = {}): Promise<number> {
  let moved = 0;
  for (;;) {
    const commands = await take(db.sql, 'commands');
    for (const c of commands) await db.sql.begin((tx) => byTopic[c.topic]!(c.envelope, tx, context));
    const replies = await take(db.sql, 'replies');
    if (!options.dropReplies) for (const r of replies) await db.sql.begin((tx) => onReply(r.envelope, tx, context));
    moved += commands.length + replies.length;
    if (commands.length + replies.length === 0 || options.dropReplies) return moved;
  }
}

test('a saga whose steps all succeed completes: commands in order, data folded, one history line per transition', async () => {
  const { sagaId, created } = await db.sql.begin((tx) =>
    sagas.start(tx, order, { businessKey: 'o-1', data: { orderId: 'o-1', amount: 10 } }),
  );
  assert.ok(created);
  const again = await db.sql.begin((tx) =>
    sagas.start(tx, order, { businessKey: 'o-1', data: { orderId: 'o-1', amount: 10 } }),
  );
  assert.deepEqual(
    again,
    { sagaId, created: false },
    'a second start with the same business key returns the first saga',
  );
  await pump();
  const saga = await readSaga(db.sql, sagaId);
  assert.equal(saga!.status, 'completed');
  assert.deepEqual(saga!.steps, ['succeeded', 'succeeded', 'succeeded']);
  assert.equal((saga!.data as Order).reservation, 'r-o-1');
  assert.deepEqual(
    (await sagaHistory(db.sql, sagaId)).map((h) => `${h.from ?? '-'}→${h.to} ${h.step}`),
    ['-→running reserve', 'running→running reserve', 'running→running charge', 'running→completed ship'],
  );
  const [sent] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_outbox WHERE aggregate_id LIKE ${`saga:${sagaId}:%`} AND topic NOT LIKE 'postbox.saga.%'`;
  assert.equal(sent!.n, 3, 'one command per step, no more');
});

test('a refusal at step 2 compensates step 1, then the saga is compensated; nothing is charged or shipped', async () => {
  effects.length = 0;
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, order, { businessKey: 'o-2', data: { orderId: 'o-2', amount: 5000 } }),
  );
  await pump();
  const saga = await readSaga(db.sql, sagaId);
  assert.equal(saga!.status, 'compensated');
  assert.deepEqual(saga!.steps, ['compensated', 'failed', 'pending']);
  assert.deepEqual(effects, ['reserve o-2', 'release r-o-2'], 'reserved, then released: in that order, once each');
  const history = (await sagaHistory(db.sql, sagaId)).map((h) => h.to);
  assert.deepEqual(history, ['running', 'running', 'compensating', 'compensated']);
});

test('a lost reply: the timeout asks, the participant says applied, the saga goes on without applying twice', async () => {
  effects.length = 0;
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, order, { businessKey: 'o-3', data: { orderId: 'o-3', amount: 10 } }),
  );
  await pump({ dropReplies: true }); // inventory reserved; its reply is lost
  const waiting = await readSaga(db.sql, sagaId);
  assert.equal(waiting!.status, 'running');
  // The command's timeout fires (the timer runner would call this at due_at).
  assert.equal(await db.sql.begin((tx) => sagas.onTimer(tx, sagaId, waiting!.version, waiting!.dueAt! + 1)), 'applied');
  assert.equal((await readSaga(db.sql, sagaId))!.status, 'resolving');
  // A timer armed at the old version is fenced.
  assert.equal(await db.sql.begin((tx) => sagas.onTimer(tx, sagaId, waiting!.version, waiting!.dueAt! + 2)), 'stale');
  await pump();
  const saga = await readSaga(db.sql, sagaId);
  assert.equal(saga!.status, 'completed');
  assert.deepEqual(effects, ['reserve o-3', 'charge o-3'], 'the reservation was not made twice');
});

test('a step asked about before its command arrives is fenced: the late command is refused, nothing applied', async () => {
  effects.length = 0;
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, order, { businessKey: 'o-4', data: { orderId: 'o-4', amount: 10 } }),
  );
  const [command] = await take(db.sql, 'commands'); // the reserve command is "in flight" (not delivered yet)
  const first = await readSaga(db.sql, sagaId);
  await db.sql.begin((tx) => sagas.onTimer(tx, sagaId, first!.version, first!.dueAt! + 1)); // timeout → query
  await pump(); // inventory answers the query: never seen → fenced, not applied → nothing to compensate
  assert.equal((await readSaga(db.sql, sagaId))!.status, 'compensated');
  await db.sql.begin((tx) => inventory(command!.envelope, tx, context)); // the late command
  const replies = await take(db.sql, 'replies');
  assert.deepEqual(
    replies.map((r) => r.envelope.event_type),
    [REPLY.notApplied],
  );
  for (const r of replies) await db.sql.begin((tx) => onReply(r.envelope, tx, context));
  assert.deepEqual(effects, [], 'the late command applied nothing');
  const [ignored] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM saga_reply_ignored WHERE saga_id = ${sagaId}`;
  assert.equal(ignored!.n, 1, 'its reply was recorded and not applied');
});

test('replies for no saga, for another step, and malformed ones are recorded and change nothing', async () => {
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, order, { businessKey: 'o-5', data: { orderId: 'o-5', amount: 10 } }),
  );
  const before = await readSaga(db.sql, sagaId);
  const reply = (extensions: Record<string, string> | undefined, type = 'inventory.reserved'): Envelope =>
    ({
      event_id: crypto.randomUUID(),
      event_type: type,
      schema_version: 1,
      aggregate_id: 'x',
      aggregate_version: 1,
      occurred_at: new Date().toISOString(),
      producer: 't',
      data: { id: 'r' },
      ...(extensions ? { extensions } : {}),
    }) as Envelope;
  const unknown = { sagaid: crypto.randomUUID(), sagastep: 'reserve', sagadirection: 'forward', sagaattempt: '1' };
  const wrongStep = { sagaid: sagaId, sagastep: 'ship', sagadirection: 'forward', sagaattempt: '1' };
  const wrongAttempt = { sagaid: sagaId, sagastep: 'reserve', sagadirection: 'forward', sagaattempt: '7' };
  for (const r of [
    reply(unknown),
    reply(wrongStep, 'shipping.shipped'),
    reply(wrongAttempt),
    reply(undefined),
    reply({ sagaid: 'nope' }),
  ]) {
    await db.sql.begin((tx) => onReply(r, tx, context));
  }
  const after = await readSaga(db.sql, sagaId);
  assert.deepEqual(after, before, 'the saga did not move');
  const reasons = await db.sql<
    { reason: string }[]
  >`SELECT reason FROM saga_reply_ignored WHERE at > now() - interval '1 minute' ORDER BY id DESC LIMIT 5`;
  assert.equal(reasons.length, 5);
});

test('two replies for one saga at once: exactly one transition wins', async () => {
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, order, { businessKey: 'o-6', data: { orderId: 'o-6', amount: 10 } }),
  );
  await take(db.sql, 'commands');
  const make = (): Envelope =>
    ({
      event_id: crypto.randomUUID(),
      event_type: 'inventory.reserved',
      schema_version: 1,
      aggregate_id: `saga:${sagaId}:reserve:forward`,
      aggregate_version: 1,
      occurred_at: new Date().toISOString(),
      producer: 't',
      data: { id: 'r-o-6' },
      extensions: { sagaid: sagaId, sagastep: 'reserve', sagadirection: 'forward', sagaattempt: '1' },
    }) as Envelope;
  await Promise.all([make(), make()].map((r) => db.sql.begin((tx) => onReply(r, tx, context))));
  const saga = await readSaga(db.sql, sagaId);
  assert.equal(saga!.version, 2, 'one transition');
  assert.equal(saga!.step, 1);
  const [ignored] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM saga_reply_ignored WHERE saga_id = ${sagaId}`;
  assert.equal(ignored!.n, 1, 'the other was recorded as stale');
});

test('the timer runner fires what is due from the rows: an unanswered command is asked about; a finished saga has no timers', async () => {
  effects.length = 0;
  const runner = new SagaTimerRunner(db.sql, sagas);
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, order, { businessKey: 'o-7', data: { orderId: 'o-7', amount: 10 } }),
  );
  const started = await readSaga(db.sql, sagaId);
  await runner.fireDue(started!.dueAt! - 1); // other tests' sagas may be due by then; this one is not
  assert.deepEqual(await readSaga(db.sql, sagaId), started, 'not due yet: untouched');
  await take(db.sql, 'commands'); // the reserve command is lost on its way (never delivered)
  const moved = await runner.fireDue(started!.dueAt! + 1);
  assert.ok(moved >= 1);
  const resolving = await readSaga(db.sql, sagaId);
  assert.equal(resolving!.status, 'resolving');
  await pump(); // the query: never seen → fenced, not applied → nothing before it to undo
  const saga = await readSaga(db.sql, sagaId);
  assert.equal(saga!.status, 'compensated');
  await runner.fireDue(Date.now() + 3_600_000);
  assert.deepEqual(await readSaga(db.sql, sagaId), saga, 'a finished saga has no timers');
  assert.deepEqual(effects, []);
});

test('versioning: a definition that changed shape without a new version, or a process missing a version unfinished sagas need, refuses to start', async () => {
  await sagas.register(db.sql); // the first run under v1 stores its shape
  const [known] = await db.sql<{ steps: string[] }[]>`
    SELECT steps FROM saga_definition WHERE saga_type = 'order-fulfilment' AND version = 1`;
  assert.deepEqual(known!.steps, ['reserve', 'charge', 'ship']);

  const reshaped = defineSaga<Order>({ ...orderInput, steps: orderInput.steps.slice(0, 2) });
  await assert.rejects(
    new SagaOrchestrator([reshaped]).register(db.sql),
    (e: Error) =>
      e instanceof ConfigError &&
      /order-fulfilment v1 changed shape since it was first run \(steps then: reserve → charge → ship; now: reserve → charge\)/.test(
        e.message,
      ),
  );

  const v2 = defineSaga<Order>({ ...orderInput, version: 2 });
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, order, { businessKey: 'o-versioned', data: { orderId: 'o-versioned', amount: 10 } }),
  );
  await assert.rejects(
    new SagaOrchestrator([v2]).register(db.sql),
    (e: Error) =>
      e instanceof ConfigError &&
      /need definitions this process does not load \(\d+ of order-fulfilment v1\)/.test(e.message),
  );
  await new SagaOrchestrator([order, v2]).register(db.sql); // both loaded: v1's sagas finish, new ones start on v2
  const [rows] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM saga_definition`;
  assert.equal(rows!.n, 2);
  assert.equal((await readSaga(db.sql, sagaId))!.definitionVersion, 1, 'an instance keeps the version it started with');
});
