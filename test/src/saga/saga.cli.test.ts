import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readSaga, SagaOrchestrator } from '@postbox/engine/saga';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { spawnPostbox } from '../support/processes.ts';
import { stack } from '../support/stack.ts';
import { OPERATOR_SAGAS_MODULE, opsOrder } from './fixtures/operator-sagas.ts';

// `postbox sagas` as an operator runs it: a real process on a fresh database, definitions loaded from
// POSTBOX_SAGA_MODULES, `--json` parsed from stdout, exit codes 0 (done), 1 (refused, not found), 2 (usage).

let db: TestDatabase;
const sagas = new SagaOrchestrator([opsOrder]);
let completed: string;
let running: string;

async function cli(args: string[], env: Record<string, string> = {}) {
  const run = spawnPostbox(['sagas', ...args], {
    ...stack,
    DATABASE_URL: db.url,
    POSTBOX_SAGA_MODULES: OPERATOR_SAGAS_MODULE,
    POSTBOX_ACTOR: 'cli-operator',
    ...env,
  });
  let stdout = '';
  run.child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  const code = await run.exited;
  return { code, stdout, output: run.output() };
}

async function json(args: string[], env: Record<string, string> = {}) {
  const r = await cli([...args, '--json'], env);
  assert.equal(r.code, 0, r.output);
  return JSON.parse(r.stdout);
}

before(async () => {
  db = await freshDatabase();
  completed = (
    await db.sql.begin((tx) => sagas.start(tx, opsOrder, { businessKey: 'cli-done', data: { orderId: 'cli-done' } }))
  ).sagaId;
  for (const type of ['inventory.reserved', 'payments.charged', 'shipping.shipped', 'notify.sent']) {
    const s = (await readSaga(db.sql, completed))!;
    await db.sql.begin((tx) =>
      sagas.onReply(tx, {
        eventId: randomUUID(),
        sagaId: completed,
        step: opsOrder.steps[s.step]!.name,
        direction: 'forward',
        attempt: 1,
        type,
        data: { id: 'r-1' },
      }),
    );
  }
  running = (
    await db.sql.begin((tx) => sagas.start(tx, opsOrder, { businessKey: 'cli-open', data: { orderId: 'cli-open' } }))
  ).sagaId;
});

after(async () => {
  await db?.drop();
});

test('list and show: rows newest first, filtered by status; a saga by id or business key with steps, history and allowed actions', async () => {
  const all = await json(['list']);
  assert.deepEqual(
    all.map((r: any) => [r.sagaId, r.status]),
    [
      [running, 'running'],
      [completed, 'completed'],
    ],
  );
  const done = await json(['list', '--status', 'completed']);
  assert.deepEqual(
    done.map((r: any) => r.sagaId),
    [completed],
  );

  const shown = await json(['show', running]);
  assert.equal(shown.id, running);
  assert.equal(shown.status, 'running');
  assert.equal(shown.definitionLoaded, true);
  assert.deepEqual(shown.allowedActions, ['retry', 'resolve', 'compensate', 'close']);
  assert.deepEqual(
    shown.steps.map((s: any) => `${s.name}:${s.status}:${s.sends}`),
    ['reserve:running:1', 'charge:pending:0', 'ship:pending:0', 'notify:pending:0'],
  );
  assert.deepEqual(
    shown.history.map((h: any) => `${h.from ?? '-'}→${h.to} ${h.actor}`),
    ['-→running postbox'],
  );
  const byKey = await json(['show', '--business-key', 'cli-done', '--type', 'ops-order']);
  assert.equal(byKey.id, completed);
  assert.deepEqual(byKey.allowedActions, []);
  assert.equal(byKey.history.length, 5);

  const text = await cli(['show', running]);
  assert.equal(text.code, 0, text.output);
  console.log(`$ postbox sagas show ${running}\n${text.stdout}`);
  assert.match(text.stdout, /reserve\s+running/);
  assert.match(text.stdout, /allowed actions: retry, resolve, compensate, close/);

  const missing = await cli(['show', randomUUID()]);
  assert.equal(missing.code, 1);
  assert.match(missing.output, /no saga/);
});

test('close: closed_manually under the actor, audited; again: refused (exit 1); no reason or no definitions: exit 2 / 1', async () => {
  const noReason = await cli(['close', running]);
  assert.equal(noReason.code, 2, noReason.output);
  assert.match(noReason.output, /--reason is required/);
  const usage = await cli(['close', 'not-a-uuid', '--reason', 'x']);
  assert.equal(usage.code, 2, usage.output);

  const bare = await cli(['close', running, '--reason', 'no definitions'], { POSTBOX_SAGA_MODULES: '' });
  assert.equal(bare.code, 1, bare.output);
  assert.match(bare.output, /POSTBOX_SAGA_MODULES/);
  assert.equal((await readSaga(db.sql, running))!.status, 'running', 'refused: nothing changed');

  const closed = await json(['close', running, '--reason', 'customer called to cancel']);
  assert.deepEqual(
    { action: closed.action, actor: closed.actor, before: closed.before.status, after: closed.after.status },
    { action: 'close', actor: 'cli-operator', before: 'running', after: 'closed_manually' },
  );
  assert.equal((await readSaga(db.sql, running))!.status, 'closed_manually');
  const [h] = await db.sql<{ actor: string; cause: string }[]>`
    SELECT actor, cause FROM saga_history WHERE saga_id = ${running} ORDER BY id DESC LIMIT 1`;
  assert.deepEqual(h, { actor: 'cli-operator', cause: 'close by cli-operator: customer called to cancel' });

  const again = await cli(['close', running, '--reason', 'twice']);
  assert.equal(again.code, 1, again.output);
  assert.match(again.output, /refused: the saga is closed_manually/);

  const audit = await db.sql<{ action: string; outcome: string; actor: string; reason: string }[]>`
    SELECT action, outcome, actor, reason FROM operator_audit WHERE target = ${running} ORDER BY audit_id`;
  assert.deepEqual(
    audit.map((a) => `${a.action} ${a.outcome} ${a.actor} ${a.reason}`),
    [
      'saga.close refused cli-operator no definitions',
      'saga.close ok cli-operator customer called to cancel',
      'saga.close refused cli-operator twice',
    ],
  );
});

test('POSTBOX_SAGA_MODULES that cannot be loaded, or exports no definitions, is named in the error', async () => {
  const missing = await cli(['show', completed], { POSTBOX_SAGA_MODULES: './no/such/sagas.ts' });
  assert.equal(missing.code, 1, missing.output);
  assert.match(missing.output, /POSTBOX_SAGA_MODULES: cannot load \.\/no\/such\/sagas\.ts/);
  const noExport = new URL('./fixtures/order-saga.ts', import.meta.url).pathname;
  const empty = await cli(['show', completed], { POSTBOX_SAGA_MODULES: noExport });
  assert.equal(empty.code, 1, empty.output);
  assert.match(empty.output, new RegExp(`POSTBOX_SAGA_MODULES: ${noExport} exports no saga definitions`));
});
