import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { classify } from '@postbox/engine/runtime';
import {
  defineSaga,
  readSaga,
  SagaOrchestrator,
  SagaTimerRunner,
  sagaHistory,
  sagaReplyHandler,
  type SagaInput,
} from '@postbox/engine/saga';
import type { Envelope } from '@postbox/engine';
import { freshDatabase, type TestDatabase } from '../support/database.ts';

// A rolling deploy that dropped a definition version: a process that does not load v1 leaves v1's sagas to a
// process that does — its timer runner does not fire them (nor let them take its looks), its reply handler fails
// their replies transiently (the consumer's retry path brings them to a process that loads v1) — and once they
// are overdue past the grace period, it freezes them as definition_missing.
let db: TestDatabase;

const input = (version: number): SagaInput<{ orderId: string }> => ({
  type: 'dm-order',
  version,
  replyTopic: 'dm.replies',
  steps: [
    {
      name: version === 1 ? 'reserve' : 'reserve-v2',
      topic: 'dm.inventory',
      timeoutMs: 1000,
      command: (d) => ({ type: 'inventory.reserve', data: d }),
      success: ['inventory.reserved'],
      failure: ['inventory.out_of_stock'],
    },
  ],
});
const v1 = defineSaga(input(1));
const v2 = defineSaga(input(2));
const other = defineSaga({ ...input(1), type: 'dm-other' });
/** The old release: loads v1 and v2 (and another type). */
const old = new SagaOrchestrator([v1, v2, other]);
/** The new release: v2 only. */
const current = new SagaOrchestrator([v2]);

let s1: string;
let s2: string;
let otherId: string;
const t0 = Date.now() - 10 * 60_000;

before(async () => {
  db = await freshDatabase();
  await old.register(db.sql);
  // v1's saga is started first: the oldest due.
  s1 = (await db.sql.begin((tx) => old.start(tx, v1, { businessKey: 'a', data: { orderId: 'a' }, now: t0 }))).sagaId;
  s2 = (await db.sql.begin((tx) => old.start(tx, v2, { businessKey: 'b', data: { orderId: 'b' }, now: t0 + 1 })))
    .sagaId;
  otherId = (
    await db.sql.begin((tx) => old.start(tx, other, { businessKey: 'c', data: { orderId: 'c' }, now: t0 + 2 }))
  ).sagaId;
});
after(async () => {
  await db.drop();
});

test('a timer runner fires only the versions it loads: an unloaded one neither fires nor takes its look', async () => {
  // A look of one saga: v1's saga, the oldest due, must not take it.
  const runner = new SagaTimerRunner(db.sql, current, { batch: 1 });
  await runner.fireDue(t0 + 5000);
  assert.equal((await readSaga(db.sql, s2))!.status, 'resolving', 'the loaded version fired');
  const untouched = (await readSaga(db.sql, s1))!;
  assert.deepEqual([untouched.status, untouched.version], ['running', 1], 'the unloaded version left alone');
});

test('a reply for an unloaded version fails transiently and is not recorded as ignored', async () => {
  const reply = {
    event_id: '00000000-0000-4000-8000-00000000d001',
    event_type: 'inventory.reserved',
    aggregate_id: `saga:${s1}:reserve:forward`,
    aggregate_version: 1,
    data: {},
    extensions: { sagaid: s1, sagastep: 'reserve', sagadirection: 'forward', sagaattempt: '1' },
  } as unknown as Envelope;
  const handler = sagaReplyHandler(current);
  let thrown: unknown = null;
  await db.sql
    .begin((tx) => handler(reply, tx, { consumer: 'dm', partition: 0, offset: '0', attempt: 1 }))
    .catch((e: unknown) => {
      thrown = e;
    });
  assert.ok(thrown, 'the reply is not consumed');
  assert.deepEqual([classify(thrown).kind, classify(thrown).code], ['transient', 'saga_definition_missing']);
  const [ignored] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM saga_reply_ignored`;
  assert.equal(ignored!.n, 0);
  assert.equal((await readSaga(db.sql, s1))!.version, 1);

  // A process that loads v1 takes the same reply.
  await db.sql.begin((tx) =>
    sagaReplyHandler(old)(reply, tx, { consumer: 'dm', partition: 0, offset: '0', attempt: 2 }),
  );
  assert.equal((await readSaga(db.sql, s1))!.status, 'completed');
});

test('past the grace period, a runner freezes the unloaded version’s sagas as definition_missing (not other types)', async () => {
  const s3 = (await db.sql.begin((tx) => old.start(tx, v1, { businessKey: 'd', data: { orderId: 'd' }, now: t0 + 3 })))
    .sagaId;
  // Within the grace period: left alone.
  const runner = new SagaTimerRunner(db.sql, current, { definitionMissingGraceMs: 60_000 });
  await runner.fireDue(t0 + 30_000);
  assert.equal((await readSaga(db.sql, s3))!.status, 'running');
  // Past it: frozen, with a history line naming the step (from the stored definition).
  await runner.fireDue(t0 + 5 * 60_000);
  const frozen = (await readSaga(db.sql, s3))!;
  assert.deepEqual(
    [frozen.status, frozen.attentionReason, frozen.version],
    ['needs_attention', 'definition_missing', 2],
  );
  const last = (await sagaHistory(db.sql, s3)).at(-1)!;
  assert.deepEqual([last.from, last.to, last.step], ['running', 'needs_attention', 'reserve']);
  assert.match(last.cause, /^definition_missing: /);
  // A type this process does not run at all is another service's: never frozen here.
  assert.equal((await readSaga(db.sql, otherId))!.status, 'running');
});
