import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, test } from 'node:test';
import { migrateDemo } from '@postbox/api/demo';
import { connect, migrate, pendingMigrations, type Sql } from '@postbox/engine';
import { stack } from '../support/stack.ts';

// The product's migration chain holds only Postbox's tables; the demo's business tables have a chain of their
// own (scope `demo`). An installation from before the split (its runner table keyed by version alone, the
// demo's tables made by the product's 0004 and 0005) moves over without re-running or losing anything.
const databases: Array<{ name: string; sql: Sql }> = [];

async function emptyDatabase(): Promise<Sql> {
  const name = `pbt_mig_${randomBytes(5).toString('hex')}`;
  const admin = connect({ url: stack.DATABASE_URL, max: 1 });
  await admin.unsafe(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(stack.DATABASE_URL);
  url.pathname = `/${name}`;
  const sql = connect({ url: url.toString(), max: 2 });
  databases.push({ name, sql });
  return sql;
}

after(async () => {
  const admin = connect({ url: stack.DATABASE_URL, max: 1 });
  for (const { name, sql } of databases) {
    await sql.end({ timeout: 5 });
    await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
  await admin.end();
});

async function tables(sql: Sql): Promise<string[]> {
  const rows = await sql<{ t: string }[]>`SELECT tablename AS t FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`;
  return rows.map((r) => r.t);
}

async function ledger(sql: Sql): Promise<string[]> {
  const rows = await sql<
    { s: string }[]
  >`SELECT scope || ':' || version AS s FROM postbox_migration ORDER BY scope, version`;
  return rows.map((r) => r.s);
}

test('a new database gets Postbox tables only; the demo scope adds the demo tables, each chain numbered from 1', async () => {
  const sql = await emptyDatabase();
  const chain = (await pendingMigrations(sql)).map((f) => f.version);
  assert.deepEqual(chain.slice(0, 4), [1, 2, 3, 6], 'numbered from 1; 4 and 5 retired (they made the demo tables)');
  assert.deepEqual(
    chain.slice(3),
    Array.from({ length: chain.length - 3 }, (_, i) => 6 + i),
    'no gap after them',
  );
  const applied = await migrate(sql);
  assert.deepEqual(applied, chain);
  assert.ok(!(await tables(sql)).some((t) => t.startsWith('demo_')), 'no demo table in the product chain');
  assert.deepEqual(await migrateDemo(sql), [1, 2, 3]);
  assert.ok((await tables(sql)).includes('demo_order_projection'));
  assert.deepEqual(await ledger(sql), ['demo:1', 'demo:2', 'demo:3', ...chain.map((v) => `postbox:${v}`)]);
  assert.deepEqual(await Promise.all([migrate(sql), migrateDemo(sql)]), [[], []]);
});

test('an installation from before the scopes upgrades in place: nothing re-applied, the demo tables adopted', async () => {
  const sql = await emptyDatabase();
  // The runner's table as it was, with every product version applied, and the tables the old 0004/0005 made.
  await sql`CREATE TABLE postbox_migration (version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
                                           applied_at timestamptz NOT NULL DEFAULT now())`;
  await migrate(sql);
  await sql`DELETE FROM postbox_migration WHERE scope <> 'postbox'`;
  await sql`ALTER TABLE postbox_migration DROP CONSTRAINT postbox_migration_pkey, ADD PRIMARY KEY (version)`;
  await sql`ALTER TABLE postbox_migration DROP COLUMN scope`;
  await sql`INSERT INTO postbox_migration (version, name, checksum) VALUES (4, 'demo_order', 'old'), (5, 'demo_projection', 'old')`;
  await sql`CREATE TABLE demo_order (order_id text PRIMARY KEY, state text NOT NULL, amount_cents integer NOT NULL,
                                     version bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`;
  await sql`INSERT INTO demo_order VALUES ('o-1', 'placed', 100, 1)`;

  assert.deepEqual(await migrate(sql), [], 'nothing of the product chain runs again');
  assert.deepEqual(await migrateDemo(sql), [1, 2, 3], 'the old tables adopted (1, 2), the saga demo tables new (3)');
  const [kept] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM demo_order`;
  assert.equal(kept!.n, 1, 'the demo table was adopted, not recreated');
  assert.ok((await ledger(sql)).includes('postbox:4'), 'retired versions stay recorded');
  const [key] = await sql<{ n: number }[]>`
    SELECT i.indnkeyatts::int AS n FROM pg_index i WHERE i.indrelid = 'postbox_migration'::regclass AND i.indisprimary`;
  assert.equal(key!.n, 2, 'the runner table is keyed by (scope, version)');
});
