import assert from 'node:assert/strict';
import { cp, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { pendingMigrations, upgradeKind } from '@postbox/engine';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { spawnPostbox } from '../support/processes.ts';

// `postbox migrate --check` (issue 24, rolling upgrades): on an installation of an older release it lists what is
// pending, each expand or contract with its reason, and applies nothing; a contract pending is exit 2.
const OLDER = 17;
let db: TestDatabase;
let dir: string;

before(async () => {
  db = await freshDatabase('pbchk', undefined, { migrateTo: OLDER });
  dir = await mkdtemp(join(tmpdir(), 'postbox-migrations-'));
});

after(async () => {
  await db.drop();
  await rm(dir, { recursive: true, force: true });
});

const applied = async () =>
  (await db.sql<{ v: number }[]>`SELECT max(version)::int AS v FROM postbox_migration WHERE scope = 'postbox'`)[0]!.v;

test('--check on an older installation lists the pending migrations as expand and applies nothing; then up to date', async () => {
  const check = spawnPostbox(['migrate', '--check'], { DATABASE_URL: db.url });
  assert.equal(await check.exited, 0, check.output());
  const lines = check.output().split('\n');
  for (const v of ['0018_retention_ledger', '0019_default_sweep', '0020_role_functions'])
    assert.ok(
      lines.some((l) => l.startsWith(v) && / expand /.test(l)),
      `${v} listed as expand:\n${check.output()}`,
    );
  assert.match(check.output(), /all expand: safe to apply while processes of the previous version run/);
  assert.equal(await applied(), OLDER, '--check applied nothing');

  const run = spawnPostbox(['migrate'], { DATABASE_URL: db.url });
  assert.equal(await run.exited, 0, run.output());
  const again = spawnPostbox(['migrate', '--check'], { DATABASE_URL: db.url });
  assert.equal(await again.exited, 0, again.output());
  assert.match(again.output(), /up to date: nothing pending/);
});

test('a pending contract is named with its reason', async () => {
  const repository = join(import.meta.dirname, '../../../migrations');
  await cp(repository, dir, { recursive: true });
  const next = (await pendingMigrations(db.sql, { directory: dir })).length;
  assert.equal(next, 0, 'the copy is applied already');
  // The version after the chain's last, whatever that is by now.
  const last = Math.max(...(await readdir(dir)).map((f) => Number(/^(\d+)_/.exec(f)?.[1] ?? 0)));
  const version = last + 1;
  await writeFile(
    join(dir, `${String(version).padStart(4, '0')}_drop_producer.sql`),
    'ALTER TABLE message_outbox DROP COLUMN producer;\n',
  );
  const pending = await pendingMigrations(db.sql, { directory: dir });
  assert.deepEqual(
    pending.map((f) => [f.version, upgradeKind(f.version, f.text)]),
    [[version, { kind: 'contract', reasons: ['drops what old code may use'] }]],
  );
});
