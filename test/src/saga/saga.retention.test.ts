import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { resolveRetentionPolicy, runRetention } from '@postbox/engine/retention';
import { defineSaga, readSaga, SagaOrchestrator, sagaHistory } from '@postbox/engine/saga';
import { freshDatabase, type TestDatabase } from '../support/database.ts';

// Ended sagas and their history leave with the retention run after their window (30 days by default, like the
// outbox's); unfinished and frozen sagas stay however old, and so do ended ones inside the window.
let db: TestDatabase;
let archiveDir: string;

const definition = defineSaga<{ orderId: string }>({
  type: 'ret-order',
  version: 1,
  replyTopic: 'ret.replies',
  steps: [
    {
      name: 'reserve',
      topic: 'ret.inventory',
      command: (d) => ({ type: 'inventory.reserve', data: d }),
      success: ['inventory.reserved'],
      failure: ['inventory.out_of_stock'],
    },
  ],
});
const sagas = new SagaOrchestrator([definition]);

before(async () => {
  db = await freshDatabase();
  archiveDir = await mkdtemp(path.join(tmpdir(), 'pbt-saga-retention-'));
});
after(async () => {
  await db.drop();
  await rm(archiveDir, { recursive: true, force: true });
});

/** A saga in `status`, last changed `daysAgo` days ago (its history line as old). */
async function saga(key: string, status: string, daysAgo: number): Promise<string> {
  const { sagaId } = await db.sql.begin((tx) =>
    sagas.start(tx, definition, { businessKey: key, data: { orderId: key } }),
  );
  await db.sql`
    UPDATE saga_instance SET status = ${status}, updated_at = now() - make_interval(days => ${daysAgo})
    WHERE saga_id = ${sagaId}`;
  return sagaId;
}

test('the retention run deletes ended sagas past the window with their history, and nothing else', async () => {
  const gone = [
    await saga('completed-old', 'completed', 31),
    await saga('compensated-old', 'compensated', 45),
    await saga('closed-old', 'closed_manually', 31),
  ];
  const kept = [
    await saga('completed-recent', 'completed', 29),
    await saga('frozen-old', 'needs_attention', 90),
    await saga('running-old', 'running', 90),
  ];
  await db.sql`
    INSERT INTO saga_reply_ignored (event_id, saga_id, reply_type, reason, at) VALUES
      (gen_random_uuid(), ${gone[0]!}, 'inventory.reserved', 'saga is completed', now() - interval '31 days'),
      (gen_random_uuid(), ${kept[0]!}, 'inventory.reserved', 'saga is completed', now() - interval '1 day')`;

  const report = await runRetention(db.sql, {
    policy: resolveRetentionPolicy({ archiveDir }),
    trigger: 'cli',
    actor: 'test',
  });
  assert.deepEqual(report.sagasPurged, { sagas: 3, ignoredReplies: 1 });
  for (const id of gone) {
    assert.equal(await readSaga(db.sql, id), undefined);
    assert.equal((await sagaHistory(db.sql, id)).length, 0, 'its history went with it');
  }
  for (const id of kept) {
    assert.ok(await readSaga(db.sql, id));
    assert.equal((await sagaHistory(db.sql, id)).length, 1);
  }
  const [ignored] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM saga_reply_ignored`;
  assert.equal(ignored!.n, 1);
});

test('the saga window is the policy’s sagaDays', async () => {
  const id = await saga('completed-8d', 'completed', 8);
  await runRetention(db.sql, {
    policy: resolveRetentionPolicy({ archiveDir, sagaDays: 7 }),
    trigger: 'cli',
    actor: 't',
  });
  assert.equal(await readSaga(db.sql, id), undefined);
});
