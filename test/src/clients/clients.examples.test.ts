// The examples of docs/database-clients.md, run: each function's body below is quoted in the docs verbatim (the
// last test checks), and each runs against the suite's database, its event checked in the outbox.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { PrismaPg } from '@prisma/adapter-pg';
import { sql as drizzleSql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { enqueue, type EventInput } from '@postbox/engine';
import { drizzleExecutor } from '@postbox/engine/drizzle';
import { kyselyExecutor } from '@postbox/engine/kysely';
import { pgExecutor } from '@postbox/engine/pg';
import { prismaExecutor } from '@postbox/engine/prisma';
import { typeormExecutor } from '@postbox/engine/typeorm';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { generatedPrismaClient, type ExamplePrisma } from './prisma-client.ts';

const DOC = fileURLToPath(new URL('../../../docs/database-clients.md', import.meta.url));
const THIS = fileURLToPath(import.meta.url);
const topic = 'orders.events';

let db: TestDatabase;
let pool: pg.Pool;

before(async () => {
  db = await freshDatabase('examples');
  await db.sql`CREATE TABLE orders (id text PRIMARY KEY, total integer NOT NULL)`;
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
});

after(async () => {
  await pool?.end();
  await db?.drop();
});

function placed(id: string): EventInput {
  return { event_type: 'OrderPlaced', aggregate_id: id, aggregate_version: 1, data: { id } };
}

async function written(id: string): Promise<{ orders: number; events: number }> {
  const [row] = await db.sql<{ orders: number; events: number }[]>`
    SELECT (SELECT count(*)::int FROM orders WHERE id = ${id}) AS orders,
           (SELECT count(*)::int FROM message_outbox WHERE aggregate_id = ${id}) AS events`;
  return row!;
}

// example: pg
async function withPg(pool: pg.Pool, id: string): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('INSERT INTO orders (id, total) VALUES ($1, $2)', [id, 100]);
    await enqueue(pgExecutor(client), placed(id), { topic });
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    client.release();
  }
}
// end

// example: drizzle
async function withDrizzle(pool: pg.Pool, id: string): Promise<void> {
  const db = drizzle(pool);
  await db.transaction(async (tx) => {
    await tx.execute(drizzleSql`INSERT INTO orders (id, total) VALUES (${id}, 100)`);
    await enqueue(drizzleExecutor(tx), placed(id), { topic });
  });
}
// end

interface Database {
  orders: { id: string; total: number };
}

// example: kysely
async function withKysely(pool: pg.Pool, id: string): Promise<void> {
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  await db.transaction().execute(async (trx) => {
    await trx.insertInto('orders').values({ id, total: 100 }).execute();
    await enqueue(kyselyExecutor(trx), placed(id), { topic });
  });
}
// end

// example: prisma
async function withPrisma(prisma: ExamplePrisma, id: string): Promise<void> {
  await prisma.$transaction(async (tx) => {
    await tx.order.create({ data: { id, total: 100 } });
    await enqueue(prismaExecutor(tx), placed(id), { topic });
  });
}
// end

// example: typeorm
async function withTypeorm(dataSource: DataSource, id: string): Promise<void> {
  await dataSource.transaction(async (manager) => {
    await manager.query('INSERT INTO orders (id, total) VALUES ($1, $2)', [id, 100]);
    await enqueue(typeormExecutor(manager), placed(id), { topic });
  });
}
// end

test('the node-postgres, Drizzle and Kysely examples write the order and its event together', async () => {
  await withPg(pool, 'pg-1');
  await withDrizzle(pool, 'drizzle-1');
  await withKysely(pool, 'kysely-1');
  for (const id of ['pg-1', 'drizzle-1', 'kysely-1']) assert.deepEqual(await written(id), { orders: 1, events: 1 }, id);
});

test('the Prisma and TypeORM examples write the order and its event together', async () => {
  const { PrismaClient } = await generatedPrismaClient();
  const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: db.url }) });
  const dataSource = new DataSource({ type: 'postgres', url: db.url, entities: [] });
  await dataSource.initialize();
  try {
    await withPrisma(prisma, 'prisma-1');
    await withTypeorm(dataSource, 'typeorm-1');
  } finally {
    await prisma.$disconnect();
    await dataSource.destroy();
  }
  for (const id of ['prisma-1', 'typeorm-1']) assert.deepEqual(await written(id), { orders: 1, events: 1 }, id);
});

test('docs/database-clients.md quotes each example above verbatim', async () => {
  const doc = await readFile(DOC, 'utf8');
  const source = await readFile(THIS, 'utf8');
  const examples = [...source.matchAll(/^\/\/ example: (\w+)\n([\s\S]*?)^\/\/ end$/gm)];
  assert.equal(examples.length, 5);
  for (const [, name, body] of examples) {
    const block = new RegExp(`<!-- example: ${name} -->\\n\`\`\`ts\\n([\\s\\S]*?)\`\`\``).exec(doc);
    assert.ok(block, `the docs have no block for the ${name} example`);
    assert.equal(block[1], body, `the docs' ${name} example differs from the one run here`);
  }
  // The consumer handlers are quoted whole, from the files clients.consume.test.ts runs.
  const files = [...doc.matchAll(/<!-- file: ([^ ]+) -->\n```ts\n([\s\S]*?)```/g)];
  assert.equal(files.length, 7);
  for (const [, file, quoted] of files)
    assert.equal(quoted, await readFile(new URL(`../../../${file}`, import.meta.url), 'utf8'), `${file} as quoted`);
});
