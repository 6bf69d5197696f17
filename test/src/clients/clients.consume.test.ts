// Consumer handlers written with node-postgres, Drizzle, Kysely, Prisma and TypeORM: each gets a handle bound to
// Postbox's own transaction (pgClient, drizzleFor, kyselyFor, prismaBinding, typeormFor; or the client declared on
// the consumer), so its writes and the inbox row commit together. Every event is
// delivered twice (the topic holds each record twice): each is applied once, and what the handle wrote reads back
// as the client would write it (jsonb an object, not a JSON string; arrays as arrays).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { and, eq } from 'drizzle-orm';
import { ConfigError, defineConsumer, enqueue, newEventId } from '@postbox/engine';
import { drizzleExecutor } from '@postbox/engine/drizzle';
import { drizzleFor } from '@postbox/engine/drizzle/node-postgres';
import { kyselyExecutor, kyselyFor } from '@postbox/engine/kysely';
import { pgClient, pgExecutor } from '@postbox/engine/pg';
import { prismaExecutor } from '@postbox/engine/prisma';
import { prismaBinding } from '@postbox/engine/prisma/adapter-pg';
import { classify, loadHandlerModule, type Consumer } from '@postbox/engine/runtime';
import { typeormExecutor, typeormFor } from '@postbox/engine/typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import { ceRecord, produce, startTestConsumer, type RawRecord } from '../support/consumer.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { clientProjection } from './fixtures/drizzle-schema.ts';
import type { ProjectionDatabase } from './fixtures/kysely-projection.handler.ts';
import { prisma } from './fixtures/prisma-projection.handler.ts';
import type { ProjectionData } from './fixtures/projection-data.ts';
import { ClientProjection, projectionDataSource } from './fixtures/typeorm-entity.ts';
import pg from 'pg';
import { generatedPrismaClient, type ExamplePrismaTx } from './prisma-client.ts';

const EVENTS = 20;
/** The handler fixture each case runs, and the `db` its consumer declares ('declared': a Kysely handle passed in). */
const CLIENTS = [
  { client: 'pg', handler: 'pg-projection', db: undefined },
  { client: 'drizzle', handler: 'drizzle-projection', db: undefined },
  { client: 'kysely', handler: 'kysely-projection', db: undefined },
  { client: 'prisma', handler: 'prisma-projection', db: undefined },
  { client: 'typeorm', handler: 'typeorm-projection', db: undefined },
  { client: 'declared', handler: 'declared-kysely', db: 'kysely' },
  { client: 'declared-prisma', handler: 'declared-prisma', db: 'prisma' },
  { client: 'declared-typeorm', handler: 'declared-typeorm', db: 'typeorm' },
] as const;

let db: TestDatabase;
const consumers: Consumer[] = [];
let dataSource: DataSource | undefined;

/** The test process's own TypeORM DataSource (the handlers' are in their worker threads). */
async function typeormSource(): Promise<DataSource> {
  dataSource ??= await projectionDataSource().initialize();
  return dataSource;
}

before(async () => {
  db = await freshDatabase('clientsconsume');
  await db.sql`CREATE TABLE client_projection (client text NOT NULL, order_id text NOT NULL, amount integer NOT NULL,
    tags text[] NOT NULL, doc jsonb NOT NULL, applied integer NOT NULL DEFAULT 1, PRIMARY KEY (client, order_id))`;
  await db.sql`CREATE TABLE client_order_probe (v text NOT NULL)`;
  // Before any consumer starts: the Prisma handlers import the generated client, the TypeORM ones read the URL.
  await generatedPrismaClient();
  process.env.CLIENTS_DATABASE_URL = db.url;
});

after(async () => {
  for (const c of consumers) await c.stop();
  await dataSource?.destroy();
  await db?.drop();
});

function data(i: number): ProjectionData {
  return { orderId: `order-${i}`, amount: i * 10, tags: ['a', `t"${i}`], doc: { note: `ü ${i}`, items: [i, i + 1] } };
}

for (const { client, handler, db: declared } of CLIENTS) {
  test(`a handler written with ${declared ? `db: '${declared}' declared` : client} applies each event once under redelivery, in Postbox's transaction`, async () => {
    const topic = uniqueTopic(`consume-${client}`);
    await createTopic(topic, 1);
    const records: RawRecord[] = Array.from({ length: EVENTS }, (_, i) =>
      ceRecord({ aggregate_id: `order-${i}`, version: 1, event_id: newEventId(), data: data(i) }),
    );
    // Every record twice: the second delivery of each must be absorbed by the inbox.
    await produce(topic, [...records, ...records]);
    const name = `clients-${client}`;
    consumers.push(
      await startTestConsumer(db.url, {
        name,
        topics: [topic],
        handler: new URL(`./fixtures/${handler}.handler.ts`, import.meta.url),
        limits: { threads: 1 },
        ...(declared ? { db: declared } : {}),
      }),
    );
    await waitFor(
      `${EVENTS} events of ${client} in the inbox`,
      async () => {
        const [row] = await db.sql<{ n: number }[]>`
          SELECT count(*)::int AS n FROM message_inbox WHERE consumer_name = ${name}`;
        return row!.n >= EVENTS;
      },
      60_000,
    );
    // The duplicates come after the originals on the one partition: once the group has read past them, it is done.
    await waitFor(`the ${client} consumer to reach the end`, async () => {
      const [row] = await db.sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM client_projection WHERE client = ${client}`;
      const stats = consumers.at(-1)!.stats();
      return row!.n === EVENTS && stats.applied + stats.duplicates >= 2 * EVENTS;
    });
    const rows = await db.sql<
      { order_id: string; amount: number; tags: string[]; doc_type: string; doc: unknown; applied: number }[]
    >`
      SELECT order_id, amount, tags, jsonb_typeof(doc) AS doc_type, doc, applied
      FROM client_projection WHERE client = ${client} ORDER BY amount`;
    assert.equal(rows.length, EVENTS);
    rows.forEach((r, i) => {
      const d = data(i);
      assert.deepEqual(
        { order_id: r.order_id, amount: r.amount, tags: r.tags, doc_type: r.doc_type, doc: r.doc, applied: r.applied },
        { order_id: d.orderId, amount: d.amount, tags: d.tags, doc_type: 'object', doc: d.doc, applied: 1 },
        `${client} row ${i}`,
      );
    });
  });
}

test('each handle reads back as its client would: numbers, arrays and jsonb parsed', async () => {
  await db.sql.begin(async (tx) => {
    const { rows } = await pgClient(tx).query<{ amount: number; tags: string[]; doc: unknown }>(
      `SELECT amount, tags, doc FROM client_projection WHERE client = 'pg' AND order_id = $1`,
      ['order-3'],
    );
    assert.deepEqual(rows, [{ amount: 30, tags: data(3).tags, doc: data(3).doc }]);
    const [drizzled] = await drizzleFor(tx)
      .select({ amount: clientProjection.amount, tags: clientProjection.tags, doc: clientProjection.doc })
      .from(clientProjection)
      .where(sqlEq(clientProjection, 'drizzle', 'order-3'));
    assert.deepEqual(drizzled, { amount: 30, tags: data(3).tags, doc: data(3).doc });
    const kyselied = await kyselyFor<ProjectionDatabase>(tx)
      .selectFrom('client_projection')
      .select(['amount', 'tags', 'doc'])
      .where('client', '=', 'kysely')
      .where('order_id', '=', 'order-3')
      .execute();
    assert.deepEqual(kyselied, [{ amount: 30, tags: data(3).tags, doc: data(3).doc }]);
    const prismaed = await prisma.run(tx, (ptx) =>
      (ptx as ExamplePrismaTx).clientProjection.findMany({
        where: { client: 'prisma', order_id: 'order-3' },
        select: { amount: true, tags: true, doc: true },
      }),
    );
    assert.deepEqual(prismaed, [{ amount: 30, tags: data(3).tags, doc: data(3).doc }]);
    const typeormed = await typeormFor<EntityManager>(tx, await typeormSource())
      .getRepository(ClientProjection)
      .findOne({ where: { client: 'typeorm', order_id: 'order-3' }, select: { amount: true, tags: true, doc: true } });
    assert.deepEqual({ ...typeormed }, { amount: 30, tags: data(3).tags, doc: data(3).doc });
  });
});

test('a consumer declaring a client Postbox has no handle for is refused by name', () => {
  assert.throws(
    () => defineConsumer({ name: 'c', topics: ['t'], handler: new URL('file:///h.js'), db: 'mongoose' as never }),
    (e) =>
      e instanceof ConfigError &&
      /db must be one of postgres\.js, pg, drizzle, kysely, prisma, typeorm, got "mongoose"/.test(e.message),
  );
});

test('a module declared for Prisma or TypeORM without its binding or DataSource is refused, saying what to export', async () => {
  const kysely = new URL('./fixtures/kysely-projection.handler.ts', import.meta.url).href;
  await assert.rejects(
    loadHandlerModule(kysely, 'prisma'),
    (e) => e instanceof ConfigError && /must export its binding: export const prisma = prismaBinding/.test(e.message),
  );
  await assert.rejects(
    loadHandlerModule(kysely, 'typeorm'),
    (e) => e instanceof ConfigError && /must export its DataSource: export const dataSource/.test(e.message),
  );
  await assert.rejects(
    loadHandlerModule(new URL('./fixtures/typeorm-synchronize.handler.ts', import.meta.url).href, 'typeorm'),
    (e) =>
      e instanceof ConfigError && /sets synchronize; Postbox initializes it in every worker thread/.test(e.message),
  );
});

test('Prisma and TypeORM handles refuse to end Postbox’s transaction; their nested transactions are savepoints', async () => {
  const source = await typeormSource();
  await assert.rejects(
    db.sql.begin(async (tx) => {
      await prisma.run(tx, async (ptx) => {
        const client = ptx as ExamplePrismaTx;
        await assert.rejects(client.$queryRawUnsafe('COMMIT'), /not allowed here/);
        await client.$queryRawUnsafe(`INSERT INTO client_order_probe VALUES ('prisma, rolled back') RETURNING v`);
      });
      const manager = typeormFor<EntityManager>(tx, source);
      await assert.rejects(manager.query('ROLLBACK'), /not allowed here/);
      // A nested transaction that fails is undone alone; the outer one goes on.
      await assert.rejects(
        manager.transaction(async (nested) => {
          await nested.query(`INSERT INTO client_order_probe VALUES ('undone')`);
          throw new Error('business rule');
        }),
        /business rule/,
      );
      await manager.query(`INSERT INTO client_order_probe VALUES ('kept')`);
      throw new Error('the handler fails: all of it rolls back');
    }),
    /all of it rolls back/,
  );
  await db.sql.begin(async (tx) => {
    await prisma.run(tx, (ptx) =>
      (ptx as ExamplePrismaTx).$queryRawUnsafe(`INSERT INTO client_order_probe VALUES ('prisma') RETURNING v`),
    );
    const manager = typeormFor<EntityManager>(tx, source);
    await manager.transaction(async (nested) => {
      await nested.query(`INSERT INTO client_order_probe VALUES ('nested')`);
    });
    await assert.rejects(
      manager.transaction(async (nested) => {
        await nested.query(`INSERT INTO client_order_probe VALUES ('undone')`);
        throw new Error('business rule');
      }),
      /business rule/,
    );
  });
  const rows = await db.sql<{ v: string }[]>`SELECT v FROM client_order_probe ORDER BY v`;
  assert.deepEqual(
    rows.map((r) => r.v),
    ['nested', 'prisma'],
  );
});

test('a handle refuses to end or start Postbox’s transaction; a savepoint is allowed', async () => {
  await db.sql.begin(async (tx) => {
    const client = pgClient(tx);
    for (const statement of ['BEGIN', 'commit', '  ROLLBACK', 'END', 'start transaction'])
      await assert.rejects(
        client.query(statement),
        (e) => e instanceof ConfigError && /not allowed here/.test(e.message),
      );
    // Hidden behind a comment, or behind a first statement (PostgreSQL refuses two statements in one call).
    await assert.rejects(client.query('/* svc */ COMMIT'), (e) => e instanceof ConfigError);
    await assert.rejects(client.query('-- svc\nROLLBACK'), (e) => e instanceof ConfigError);
    // (In a savepoint: the refusal is PostgreSQL's error, which would abort the transaction.)
    await assert.rejects(
      tx.savepoint((sp) => pgClient(sp).query('SELECT 1; COMMIT')),
      /cannot insert multiple commands/,
    );
    await client.query('SAVEPOINT mine');
    await client.query('ROLLBACK TO SAVEPOINT mine');
    await client.query('SAVEPOINT mine');
    await client.query('ROLLBACK WORK TO SAVEPOINT mine');
    await assert.rejects(
      kyselyFor<ProjectionDatabase>(tx)
        .transaction()
        .execute(async () => {}),
      (e) => e instanceof ConfigError,
    );
  });
});

test('an event written through a handler’s handle joins Postbox’s transaction, as its tx would', async () => {
  await db.sql.begin(async (tx) => {
    const event = (id: string) => ({ event_type: 'Shipped', aggregate_id: id, aggregate_version: 1, data: {} });
    const handles = [
      pgExecutor(pgClient(tx)),
      kyselyExecutor(kyselyFor<ProjectionDatabase>(tx)),
      drizzleExecutor(drizzleFor(tx)),
      typeormExecutor(typeormFor<EntityManager>(tx, await typeormSource())),
      await prisma.run(tx, async (ptx) => prismaExecutor(ptx as ExamplePrismaTx)),
    ];
    for (const [i, executor] of handles.entries()) {
      // The transaction it marks as written is the handler's own tx: the relays are nudged after its commit.
      assert.equal(executor.transaction, tx);
      await enqueue(executor, event(`bound-${i}`), { topic: 'clients.unused' });
    }
    await enqueue(kyselyFor<ProjectionDatabase>(tx) as never, event('bound-direct'), { topic: 'clients.unused' });
  });
  const [row] = await db.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM message_outbox WHERE aggregate_id LIKE 'bound-%'`;
  assert.equal(row!.n, 6);
});

test('prisma.run is a nested transaction: a throw from its callback undoes what it wrote, the handler goes on', async () => {
  await db.sql.begin(async (tx) => {
    await prisma.run(tx, (ptx) =>
      (ptx as ExamplePrismaTx).$queryRawUnsafe(`INSERT INTO client_order_probe VALUES ('run kept') RETURNING v`),
    );
    await assert.rejects(
      prisma.run(tx, async (ptx) => {
        await (ptx as ExamplePrismaTx).$queryRawUnsafe(
          `INSERT INTO client_order_probe VALUES ('run undone') RETURNING v`,
        );
        throw new Error('business rule');
      }),
      /business rule/,
    );
    await tx`INSERT INTO client_order_probe VALUES ('run after')`;
  });
  const rows = await db.sql<{ v: string }[]>`SELECT v FROM client_order_probe WHERE v LIKE 'run %' ORDER BY v`;
  assert.deepEqual(
    rows.map((r) => r.v),
    ['run after', 'run kept'],
  );
});

test('runs of one binding in flight together each write in their own transaction', async () => {
  const write = (tag: string, fail: boolean) =>
    db.sql
      .begin(async (tx) => {
        await prisma.run(tx, async (ptx) => {
          const client = ptx as ExamplePrismaTx;
          await client.$queryRawUnsafe(`INSERT INTO client_order_probe VALUES ('${tag} 1') RETURNING v`);
          await new Promise((resolve) => setTimeout(resolve, 50));
          await client.$queryRawUnsafe(`INSERT INTO client_order_probe VALUES ('${tag} 2') RETURNING v`);
        });
        if (fail) throw new Error(`${tag} rolls back`);
      })
      .catch((e: Error) => e.message);
  assert.deepEqual(await Promise.all([write('together a', true), write('together b', false)]), [
    'together a rolls back',
    undefined,
  ]);
  const rows = await db.sql<{ v: string }[]>`SELECT v FROM client_order_probe WHERE v LIKE 'together %' ORDER BY v`;
  assert.deepEqual(
    rows.map((r) => r.v),
    ['together b 1', 'together b 2'],
  );
});

test('a Prisma client with its own isolation level is refused inside Postbox’s transaction, saying why', async () => {
  const { PrismaClient } = await generatedPrismaClient();
  const serializable = prismaBinding(
    (adapter) => new PrismaClient({ adapter, transactionOptions: { isolationLevel: 'Serializable' } } as never),
  );
  await assert.rejects(
    db.sql.begin((tx) => serializable.run(tx, async () => {})),
    (e) => e instanceof ConfigError || classify(e).code === 'config_invalid',
  );
});

test('a failure written through Prisma or TypeORM keeps its class: a unique violation is permanent pg_23505', async () => {
  const source = await typeormSource();
  await db.sql`INSERT INTO client_order_probe VALUES ('unique') ON CONFLICT DO NOTHING`;
  await db.sql`CREATE UNIQUE INDEX IF NOT EXISTS client_order_probe_v ON client_order_probe (v)`;
  const failures: unknown[] = [];
  await db.sql.begin(async (tx) => {
    for (const write of [
      (sp: typeof tx) =>
        prisma.run(sp, (ptx) =>
          (ptx as ExamplePrismaTx).$queryRawUnsafe(`INSERT INTO client_order_probe VALUES ('unique') RETURNING v`),
        ),
      (sp: typeof tx) =>
        typeormFor<EntityManager>(sp, source).query(`INSERT INTO client_order_probe VALUES ('unique')`),
      (sp: typeof tx) => prisma.run(sp, (ptx) => (ptx as ExamplePrismaTx).$queryRawUnsafe('COMMIT')),
      (sp: typeof tx) => typeormFor<EntityManager>(sp, source).query('COMMIT'),
    ])
      await tx.savepoint((sp) => write(sp)).catch((e: unknown) => failures.push(e));
  });
  assert.deepEqual(
    failures.map((e) => classify(e)),
    [
      { kind: 'permanent', code: 'pg_23505', immediate: false },
      { kind: 'permanent', code: 'pg_23505', immediate: false },
      { kind: 'permanent', code: 'config_invalid', immediate: false },
      { kind: 'permanent', code: 'config_invalid', immediate: false },
    ],
  );
});

test('dates go and come back as through pg itself, also away from UTC', async () => {
  const zone = process.env.TZ;
  process.env.TZ = 'America/New_York';
  const pool = new pg.Pool({ connectionString: db.url, max: 1 });
  try {
    await db.sql`CREATE TABLE client_dates (via text PRIMARY KEY, at timestamp NOT NULL, day date NOT NULL)`;
    const at = new Date('2026-07-01T23:30:00.000Z');
    await pool.query('INSERT INTO client_dates VALUES ($1, $2, $3)', ['pg', at, at]);
    await db.sql.begin(async (tx) => {
      await pgClient(tx).query('INSERT INTO client_dates VALUES ($1, $2, $3)', ['pgClient', at, at]);
    });
    const stored = await db.sql<{ via: string; at: string; day: string }[]>`
      SELECT via, at::text AS at, day::text AS day FROM client_dates ORDER BY via`;
    assert.deepEqual(
      stored.map((r) => [r.at, r.day]),
      [
        ['2026-07-01 19:30:00', '2026-07-01'],
        ['2026-07-01 19:30:00', '2026-07-01'],
      ],
    );
    // Read back through TypeORM's handle: pg's parsers (a date column is local midnight, as pg makes it).
    const { rows: expected } = await pool.query<{ at: Date; day: Date }>(
      `SELECT at, day FROM client_dates WHERE via = 'pg'`,
    );
    const source = await typeormSource();
    const viaTypeorm = await db.sql.begin((tx) =>
      typeormFor<EntityManager>(tx, source).query(`SELECT at, day FROM client_dates WHERE via = 'pgClient'`),
    );
    assert.deepEqual(viaTypeorm, expected);
  } finally {
    await pool.end();
    if (zone === undefined) delete process.env.TZ;
    else process.env.TZ = zone;
  }
});

function sqlEq(table: typeof clientProjection, client: string, orderId: string) {
  return and(eq(table.client, client), eq(table.orderId, orderId));
}
