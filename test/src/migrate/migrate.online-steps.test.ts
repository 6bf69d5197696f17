import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { connect, migrate, type Sql } from '@postbox/engine';
import { freshDatabase, type TestDatabase } from '../support/database.ts';

// Online migrations (migrate/online.ts): a file marked `-- postbox:online` is applied a step at a time, each step
// committed and recorded, so a long change holds no lock across its steps, waits for its locks without holding up
// the writers queued behind it, and resumes at the first step not done. Each case is its own scope (chain).
let db: TestDatabase;
let dir: string;
let scopes = 0;

before(async () => {
  db = await freshDatabase();
  dir = await mkdtemp(join(tmpdir(), 'postbox-online-'));
});

after(async () => {
  await db.drop();
  await rm(dir, { recursive: true, force: true });
});

/** A fresh chain: its files written to a directory of its own; returns the scope and that directory. */
async function chain(files: Record<string, string>): Promise<{ scope: string; directory: string }> {
  const scope = `online${++scopes}`;
  const directory = join(dir, scope);
  await rm(directory, { recursive: true, force: true });
  await mkdir(directory, { recursive: true });
  for (const [name, text] of Object.entries(files)) await writeFile(join(directory, name), text);
  return { scope, directory };
}

async function stepsDone(sql: Sql, scope: string): Promise<string[]> {
  const rows = await sql<{ step: string }[]>`
    SELECT step FROM postbox_migration_step WHERE scope = ${scope} ORDER BY done_at, step`;
  return rows.map((r) => r.step);
}

async function fileDone(sql: Sql, scope: string, version: number): Promise<boolean> {
  const rows = await sql`SELECT 1 FROM postbox_migration WHERE scope = ${scope} AND version = ${version}`;
  return rows.length === 1;
}

const ONLINE = (t: string, body: string) => `-- postbox:online\n-- ${t}\n${body}`;

test('an online file: steps committed one by one (a no-transaction step outside any block), then the file recorded', async () => {
  const { scope, directory } = await chain({
    '0001_items.sql': `CREATE TABLE online_items_a (id int PRIMARY KEY, note text);\nINSERT INTO online_items_a SELECT g, 'x' FROM generate_series(1, 1000) g;`,
    '0002_index.sql': ONLINE(
      'an index built while writes go on, then a constraint validated',
      `-- postbox:step add_check
ALTER TABLE online_items_a ADD CONSTRAINT online_items_a_positive CHECK (id > 0) NOT VALID;
-- postbox:step validate no-transaction
ALTER TABLE online_items_a VALIDATE CONSTRAINT online_items_a_positive;
-- postbox:step index no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS online_items_a_note ON online_items_a (note);
`,
    ),
  });
  const lines: string[] = [];
  assert.deepEqual(await migrate(db.sql, { scope, directory, log: (l) => lines.push(l) }), [1, 2]);
  assert.deepEqual(await stepsDone(db.sql, scope), ['add_check', 'validate', 'index']);
  assert.ok(await fileDone(db.sql, scope, 2));
  const [index] = await db.sql`SELECT indisvalid FROM pg_index WHERE indexrelid = 'online_items_a_note'::regclass`;
  assert.equal(index!.indisvalid, true, 'built concurrently, valid');
  const [check] = await db.sql`SELECT convalidated FROM pg_constraint WHERE conname = 'online_items_a_positive'`;
  assert.equal(check!.convalidated, true);
  assert.ok(
    lines.some((l) => /step index done in \d+ ms/.test(l)),
    lines.join('\n'),
  );
  assert.deepEqual(await migrate(db.sql, { scope, directory }), [], 'a second run finds nothing to do');
});

test('a failed step stops the file there; fixed, the next run resumes at it and never re-runs a done step', async () => {
  const files = {
    '0001_resume.sql': ONLINE(
      'the second step fails the first time',
      `-- postbox:step first
CREATE TABLE online_resume (id int);
-- postbox:step second
INSERT INTO online_resume SELECT * FROM no_such_table;
-- postbox:step third
INSERT INTO online_resume VALUES (3);
`,
    ),
  };
  const { scope, directory } = await chain(files);
  await assert.rejects(migrate(db.sql, { scope, directory }), (e: Error) => {
    assert.match(e.message, /migration 1_resume, step second failed: .*no_such_table/);
    return true;
  });
  assert.deepEqual(await stepsDone(db.sql, scope), ['first'], 'the first step stays done');
  assert.equal(await fileDone(db.sql, scope, 1), false);
  // The failed step is fixed; the first (CREATE TABLE without IF NOT EXISTS) would fail if it ran again.
  await writeFile(
    join(directory, '0001_resume.sql'),
    files['0001_resume.sql'].replace('SELECT * FROM no_such_table', 'VALUES (2)'),
  );
  assert.deepEqual(await migrate(db.sql, { scope, directory }), [1]);
  assert.deepEqual(await stepsDone(db.sql, scope), ['first', 'second', 'third']);
  const rows = await db.sql<{ id: number }[]>`SELECT id FROM online_resume ORDER BY id`;
  assert.deepEqual(
    rows.map((r) => r.id),
    [2, 3],
  );
  // A done step changed afterwards is history rewritten: refused.
  await writeFile(join(directory, '0001_resume.sql'), files['0001_resume.sql'].replace('(id int)', '(id bigint)'));
  await assert.rejects(migrate(db.sql, { scope, directory }), /was changed after it was applied/);
});

/** A chain whose first file made `table`; then an online file that needs an ACCESS EXCLUSIVE lock on it. */
async function lockedChain(table: string): Promise<{ scope: string; directory: string }> {
  const c = await chain({ '0001_table.sql': `CREATE TABLE ${table} (id int);` });
  await migrate(db.sql, c);
  await writeFile(
    join(c.directory, '0002_alter.sql'),
    ONLINE(
      'needs an ACCESS EXCLUSIVE lock',
      `-- postbox:step add_column\nALTER TABLE ${table} ADD COLUMN note text;\n`,
    ),
  );
  return c;
}

test('a step that cannot get its lock lets go and tries again: writers are not held behind it, and it lands once the lock is free', async () => {
  const { scope, directory } = await lockedChain('online_locked');
  const holder = connect({ url: db.url, max: 1 });
  const writer = connect({ url: db.url, max: 1 });
  try {
    // A long transaction holds a lock the ALTER conflicts with.
    const held = await holder.reserve();
    await held`BEGIN`;
    await held`SELECT count(*) FROM online_locked`;
    const lines: string[] = [];
    const migrating = migrate(db.sql, {
      scope,
      directory,
      lockTimeoutMs: 200,
      lockAttempts: 20,
      log: (l) => lines.push(l),
    });
    // While the step waits, a writer is served within a lock timeout or so, never for the whole wait.
    await new Promise((r) => setTimeout(r, 700));
    const started = Date.now();
    await writer`INSERT INTO online_locked VALUES (1)`;
    const writerWaited = Date.now() - started;
    await new Promise((r) => setTimeout(r, 800));
    await held`COMMIT`;
    held.release();
    assert.deepEqual(await migrating, [2]);
    assert.ok(writerWaited < 1000, `a writer waited ${writerWaited} ms behind the waiting step`);
    assert.ok(
      lines.some((l) => l.includes('could not get its locks')),
      `it waited and tried again:\n${lines.join('\n')}`,
    );
    const [column] = await db.sql`
      SELECT 1 FROM information_schema.columns WHERE table_name = 'online_locked' AND column_name = 'note'`;
    assert.ok(column, 'the column was added');
  } finally {
    await holder.end({ timeout: 5 });
    await writer.end({ timeout: 5 });
  }
});

test('a step whose lock never frees fails by name after its attempts, the file not recorded', async () => {
  const { scope, directory } = await lockedChain('online_stuck');
  const holder = connect({ url: db.url, max: 1 });
  try {
    const held = await holder.reserve();
    await held`BEGIN`;
    await held`SELECT count(*) FROM online_stuck`;
    await assert.rejects(
      migrate(db.sql, { scope, directory, lockTimeoutMs: 100, lockAttempts: 2 }),
      /2_alter, step add_column failed: could not get its locks in 2 attempts of 100 ms/,
    );
    await held`ROLLBACK`;
    held.release();
    assert.equal(await fileDone(db.sql, scope, 2), false);
    assert.deepEqual(await stepsDone(db.sql, scope), []);
  } finally {
    await holder.end({ timeout: 5 });
  }
});

test('two migrators at once: each step and each file applied exactly once', async () => {
  const { scope, directory } = await chain({
    '0001_once.sql': ONLINE(
      'a step that would fail if it ran twice',
      `-- postbox:step make
CREATE TABLE online_once (id int);
-- postbox:step fill
INSERT INTO online_once VALUES (1);
`,
    ),
  });
  const other = connect({ url: db.url, max: 2 });
  try {
    const results = await Promise.all([migrate(db.sql, { scope, directory }), migrate(other, { scope, directory })]);
    assert.deepEqual(results.flat(), [1], 'one of them applied it');
    const [row] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM online_once`;
    assert.equal(row!.n, 1);
  } finally {
    await other.end({ timeout: 5 });
  }
});

test('an online file that is not well formed is refused by name before anything runs', async () => {
  const { scope, directory } = await chain({
    '0001_bad.sql': '-- postbox:online\nCREATE TABLE online_bad (id int);\n-- postbox:step later\nSELECT 1;\n',
  });
  await assert.rejects(
    migrate(db.sql, { scope, directory }),
    /online migration 1_bad.sql: line 2: SQL before the first step/,
  );
  const { scope: s2, directory: d2 } = await chain({
    '0001_flag.sql': '-- postbox:online\n-- postbox:step one sometimes\nSELECT 1;\n',
  });
  await assert.rejects(migrate(db.sql, { scope: s2, directory: d2 }), /unknown step flag "sometimes"/);
});
