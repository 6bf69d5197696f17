import { randomBytes } from 'node:crypto';
import { migrateDemo } from '@postbox/api/demo';
import { connect, migrate, type Sql } from '@postbox/engine';
import { stack } from './stack.ts';

export interface TestDatabase {
  url: string;
  sql: Sql;
  /** Ends the pool and drops the database. */
  drop(): Promise<void>;
}

/**
 * A new, migrated database of its own for one test file: tests never share state. On the shared stack's server,
 * or on `serverUrl` (a private server of a fault test); `migrateTo` stops the product's chain at that version (an
 * installation of an older release, to upgrade in the test).
 */
export async function freshDatabase(
  prefix = 'pbt',
  serverUrl = stack.DATABASE_URL,
  options: { migrateTo?: number } = {},
): Promise<TestDatabase> {
  const name = `${prefix}_${randomBytes(5).toString('hex')}`;
  const admin = connect({ url: serverUrl, max: 1, applicationName: 'postbox-test-admin' });
  await admin.unsafe(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = withDatabase(serverUrl, name);
  const sql = connect({ url, max: 10, applicationName: 'postbox-test' });
  await migrate(sql, { target: options.migrateTo });
  // The suite's handlers write the demo's business tables (orders, the projection): its own chain.
  await migrateDemo(sql);
  return {
    url,
    sql,
    async drop() {
      await sql.end({ timeout: 5 });
      // POSTBOX_TEST_KEEP_DB=1 keeps every test database for a post-mortem (printed here).
      if (process.env.POSTBOX_TEST_KEEP_DB) return void console.log(`# kept database ${url}`);
      const a = connect({ url: serverUrl, max: 1 });
      await a.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
      await a.end();
    },
  };
}

function withDatabase(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}
