import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { migrateDemo } from '@postbox/api/demo';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { spawnPostbox } from '../support/processes.ts';

// A new user's first `npx postbox reconcile` after `npm start`, in a checkout (issue 46): with the demo's orders in
// the database and POSTBOX_RECONCILE_MODULES unset, the demo's sources are used instead of both business checks
// being skipped; a database without the demo's tables still names the variable.
let db: TestDatabase;

before(async () => {
  db = await freshDatabase();
});
after(async () => {
  await db.drop();
});

function checks(): Promise<string> {
  const p = spawnPostbox(['reconcile', 'checks'], { DATABASE_URL: db.url, POSTBOX_RECONCILE_MODULES: '' });
  return p.exited.then((code) => {
    assert.equal(code, 0, p.output());
    return p.output();
  });
}

test("with the demo's orders here the demo's sources are used; without them the business checks say what to set", async () => {
  await migrateDemo(db.sql);
  const out = await checks();
  assert.match(out, /reconcile: the demo's sources \(POSTBOX_RECONCILE_MODULES unset/);
  assert.doesNotMatch(out, /outbox-missing .*cannot run/);
  assert.doesNotMatch(out, /consumer-behind .*cannot run/);
  assert.doesNotMatch(out, /saga-step-mismatch .*cannot run/);
  await db.sql`DROP TABLE demo_order CASCADE`;
  const without = await checks();
  assert.doesNotMatch(without, /the demo's sources/);
  assert.match(without, /outbox-missing .*cannot run: no reconcile source registered \(POSTBOX_RECONCILE_MODULES\)/);
});
