// Events written in the transaction the service already has, whatever client opened it: postgres.js, node-postgres,
// Drizzle, Kysely, Prisma and TypeORM, each through its adapter. For every client: committed → on the topic with the
// same headers as postgres.js writes; rolled back by a thrown error and by the client's own rollback → nothing;
// outside a transaction → refused, nothing written; idempotent → once.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { PrismaPg } from '@prisma/adapter-pg';
import { sql, TransactionRollbackError } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { DataSource } from 'typeorm';
import {
  enqueue,
  idempotent,
  isSqlExecutor,
  NotInTransactionError,
  type EventInput,
  type SqlExecutor,
  type Tx,
} from '@postbox/engine';
import { drizzleExecutor } from '@postbox/engine/drizzle';
import { kyselyExecutor } from '@postbox/engine/kysely';
import { pgExecutor } from '@postbox/engine/pg';
import { prismaExecutor } from '@postbox/engine/prisma';
import { typeormExecutor } from '@postbox/engine/typeorm';
import type { Relay } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, readTopic, uniqueTopic } from '../support/kafka.ts';
import { startTestRelay } from '../support/relay.ts';
import { defineSaga, SagaOrchestrator } from '@postbox/engine/saga';
import { generatedPrismaClient, type ExamplePrismaTx } from './prisma-client.ts';

/** One client: a transaction that commits, one that its own API rolls back, and a handle outside any. */
interface ClientCase {
  name: string;
  /** Runs `write` in a transaction of this client that commits. */
  commit(write: Write): Promise<void>;
  /** Runs `write` in a transaction of this client, then rolls it back with the client's own API. */
  rollBack(write: Write): Promise<void>;
  /** Runs `write` in a transaction of this client and throws from inside it. */
  throwInside(write: Write): Promise<void>;
  /** What enqueue is given for a handle outside a transaction (the pool, the database object). */
  outside(): Promise<Tx | SqlExecutor>;
  close(): Promise<void>;
}

/** The business change, written with the client's own API in the same transaction. */
type Business = (orderId: string) => Promise<void>;
/** Writes into the transaction: `tx` is what enqueue takes (postgres.js's own tx, or the client's adapter). */
type Write = (tx: Tx | SqlExecutor, business: Business) => Promise<void>;

let db: TestDatabase;
let relay: Relay;
let pool: pg.Pool;
const cases: ClientCase[] = [];

before(async () => {
  db = await freshDatabase('clients');
  await db.sql`CREATE TABLE client_order (order_id text PRIMARY KEY, client text NOT NULL)`;
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  cases.push(postgresJsCase(), pgCase(), drizzleCase(), kyselyCase(), await prismaCase(), await typeormCase());
  relay = await startTestRelay(db.sql);
});

after(async () => {
  await relay?.stop();
  for (const c of cases) await c.close();
  await pool?.end();
  await db?.drop();
});

function event(orderId: string, version = 1): EventInput {
  return {
    event_type: 'OrderPlaced',
    aggregate_id: orderId,
    aggregate_version: version,
    data: { orderId, note: 'ünïcode "quoted"', nested: { list: [1, 2, 3] } },
    tenant: 'acme',
    extensions: { region: 'eu' },
    deadline: '2030-01-01T00:00:00.000Z',
    traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
  };
}

async function counts(prefix: string): Promise<{ orders: number; events: number }> {
  const [row] = await db.sql<{ orders: number; events: number }[]>`
    SELECT (SELECT count(*)::int FROM client_order WHERE order_id LIKE ${`${prefix}%`}) AS orders,
           (SELECT count(*)::int FROM message_outbox WHERE aggregate_id LIKE ${`${prefix}%`}) AS events`;
  return row!;
}

test('every client: a committed transaction puts its events on the topic with the headers postgres.js writes', async () => {
  const headersOf = new Map<string, Record<string, string>>();
  for (const c of cases) {
    const topic = uniqueTopic(`client-${c.name}`);
    await createTopic(topic, 1);
    const orderId = `${c.name}-committed`;
    await c.commit(async (tx, business) => {
      await business(orderId);
      await enqueue(tx, event(orderId), { topic, producer: `client-${c.name}` });
    });
    assert.deepEqual(await counts(orderId), { orders: 1, events: 1 }, c.name);
    const [record] = await readTopic(topic, (r) => r.length >= 1, 60_000);
    assert.ok(record, `${c.name}: the event reached the topic`);
    assert.equal(record.key, orderId);
    // CloudEvents binary mode: the value is the data, the attributes are headers.
    assert.deepEqual(JSON.parse(record.value.toString()), event(orderId).data, `${c.name}: the payload round-trips`);
    const { ce_id, ce_source, ce_time, ce_subject, ...stable } = record.headers;
    assert.match(ce_id!, /^[0-9a-f-]{36}$/);
    assert.equal(ce_source, `client-${c.name}`);
    assert.equal(ce_subject, orderId);
    assert.ok(ce_time);
    headersOf.set(c.name, stable);
  }
  const baseline = headersOf.get('postgres.js')!;
  assert.equal(baseline.ce_tenant, 'acme');
  assert.equal(baseline.ce_region, 'eu');
  assert.equal(baseline.ce_deadline, '2030-01-01T00:00:00.000Z');
  for (const [name, headers] of headersOf) assert.deepEqual(headers, baseline, `${name}'s headers`);
});

test('every client: a transaction rolled back by a thrown error or by the client itself leaves nothing', async () => {
  for (const c of cases) {
    const thrown = `${c.name}-thrown`;
    await assert.rejects(
      c.throwInside(async (tx, business) => {
        await business(thrown);
        await enqueue(tx, event(thrown), { topic: 'clients.unused' });
      }),
      /thrown on purpose/,
    );
    assert.deepEqual(await counts(thrown), { orders: 0, events: 0 }, `${c.name}: thrown`);
    const rolled = `${c.name}-rolled`;
    await c.rollBack(async (tx, business) => {
      await business(rolled);
      await enqueue(tx, event(rolled), { topic: 'clients.unused' });
    });
    assert.deepEqual(await counts(rolled), { orders: 0, events: 0 }, `${c.name}: own rollback`);
  }
});

test('node-postgres and postgres.js: a client before BEGIN, in a failed transaction, or reserved is refused too', async () => {
  const refused = (e: unknown) => e instanceof NotInTransactionError && /nothing was written/.test(e.message);
  const client = await pool.connect();
  try {
    await assert.rejects(enqueue(pgExecutor(client), event('pg-idle'), { topic: 'clients.unused' }), refused);
    // An older pg (no getTransactionStatus) is asked with a SAVEPOINT, which PostgreSQL refuses outside BEGIN.
    const own = client as unknown as { getTransactionStatus?: unknown };
    const status = own.getTransactionStatus;
    own.getTransactionStatus = undefined;
    try {
      await assert.rejects(enqueue(pgExecutor(client), event('pg-older'), { topic: 'clients.unused' }), refused);
    } finally {
      own.getTransactionStatus = status;
    }
    await client.query('BEGIN');
    await client.query('SELECT 1/0').catch(() => {});
    await assert.rejects(enqueue(pgExecutor(client), event('pg-failed'), { topic: 'clients.unused' }), refused);
  } finally {
    // Whatever happened above, the client goes back to the pool outside any transaction.
    await client.query('ROLLBACK').catch(() => {});
    client.release();
  }
  const reserved = await db.sql.reserve();
  try {
    await assert.rejects(
      async () => enqueue(reserved as unknown as Tx, event('pjs-reserved'), { topic: 'clients.unused' }),
      refused,
    );
  } finally {
    reserved.release();
  }
  const [row] = await db.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM message_outbox WHERE aggregate_id IN ('pg-idle', 'pg-older', 'pg-failed', 'pjs-reserved')`;
  assert.equal(row!.n, 0);
});

test('every client: a handle outside a transaction is refused by name and nothing is written', async () => {
  for (const c of cases) {
    const outside = `${c.name}-outside`;
    await assert.rejects(
      async () => enqueue(await c.outside(), event(outside), { topic: 'clients.unused' }),
      (e) => e instanceof NotInTransactionError && e.client === c.name && /nothing was written/.test(e.message),
      c.name,
    );
    assert.deepEqual(await counts(outside), { orders: 0, events: 0 }, c.name);
  }
});

test('every client: idempotent runs the command once per key and hands back the client’s own handle', async () => {
  for (const c of cases) {
    const orderId = `${c.name}-idem`;
    const run = () =>
      c.commit(async (tx, business) => {
        const { repeated } = await idempotent(
          tx as SqlExecutor,
          { scope: 'place-order', key: orderId, request: { orderId } },
          async (handle) => {
            assert.equal(handle, isSqlExecutor(tx) ? tx.handle : tx, `${c.name}: fn gets the client's handle`);
            await business(orderId);
            const envelope = await enqueue(tx, event(orderId), { topic: 'clients.unused' });
            return { eventId: envelope.event_id };
          },
        );
        results.push(repeated);
      });
    const results: boolean[] = [];
    await run();
    await run();
    assert.deepEqual(results, [false, true], c.name);
    assert.deepEqual(await counts(orderId), { orders: 1, events: 1 }, c.name);
  }
});

const checkout = defineSaga<{ orderId: string }>({
  type: 'client-checkout',
  version: 1,
  steps: [
    {
      name: 'reserve',
      topic: 'clients.inventory',
      command: (d) => ({ type: 'inventory.reserve', data: { orderId: d.orderId } }),
      success: ['inventory.reserved'],
      failure: ['inventory.out_of_stock'],
    },
  ],
});
const sagas = new SagaOrchestrator([checkout]);

test('every client: a saga starts in the caller’s transaction (its row, history and first command), once per key', async () => {
  for (const c of cases) {
    const orderId = `${c.name}-saga`;
    const started: boolean[] = [];
    for (let i = 0; i < 2; i++)
      await c.commit(async (tx, business) => {
        if (i === 0) await business(orderId);
        started.push((await sagas.start(tx, checkout, { businessKey: orderId, data: { orderId } })).created);
      });
    assert.deepEqual(started, [true, false], c.name);
    const [row] = await db.sql<{ sagas: number; history: number; commands: number; data: unknown }[]>`
      SELECT (SELECT count(*)::int FROM saga_instance WHERE business_key = ${orderId}) AS sagas,
             (SELECT count(*)::int FROM saga_history h JOIN saga_instance i USING (saga_id)
               WHERE i.business_key = ${orderId}) AS history,
             (SELECT count(*)::int FROM message_outbox o JOIN saga_instance i ON o.aggregate_id LIKE 'saga:' || i.saga_id || ':%'
               WHERE i.business_key = ${orderId}) AS commands,
             (SELECT data FROM saga_instance WHERE business_key = ${orderId}) AS data`;
    assert.deepEqual(row, { sagas: 1, history: 1, commands: 1, data: { orderId } }, c.name);
    // Rolled back with the business change: no saga either.
    const rolled = `${c.name}-saga-rolled`;
    await c.rollBack(async (tx, business) => {
      await business(rolled);
      await sagas.start(tx, checkout, { businessKey: rolled, data: { orderId: rolled } });
    });
    const [none] = await db.sql<
      { n: number }[]
    >`SELECT count(*)::int AS n FROM saga_instance WHERE business_key = ${rolled}`;
    assert.equal(none!.n, 0, c.name);
  }
});

// ---- the clients --------------------------------------------------------------------------------------------

function failing(): never {
  throw new Error('thrown on purpose');
}

function postgresJsCase(): ClientCase {
  const business = (tx: Tx) => async (id: string) => {
    await tx`INSERT INTO client_order (order_id, client) VALUES (${id}, 'postgres.js')`;
  };
  return {
    name: 'postgres.js',
    commit: (write) => db.sql.begin((tx) => write(tx, business(tx))).then(() => {}),
    // postgres.js has no rollback call: a savepoint whose function rejects is rolled back, the transaction goes on.
    rollBack: async (write) => {
      await db.sql.begin(async (tx) => {
        await tx
          .savepoint((sp) => write(sp, business(sp)).then(() => Promise.reject(new RollBack())))
          .catch((e: unknown) => assert.ok(e instanceof RollBack, String(e)));
      });
    },
    throwInside: (write) => db.sql.begin((tx) => write(tx, business(tx)).then(failing)).then(() => {}),
    outside: async () => db.sql as unknown as Tx,
    close: async () => {},
  };
}

function pgCase(): ClientCase {
  const business = (client: pg.PoolClient) => async (id: string) => {
    await client.query(`INSERT INTO client_order (order_id, client) VALUES ($1, 'pg')`, [id]);
  };
  const inTransaction = async (write: Parameters<ClientCase['commit']>[0], end: 'COMMIT' | 'ROLLBACK' | 'throw') => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      try {
        await write(pgExecutor(client), business(client));
        if (end === 'throw') failing();
        await client.query(end);
      } catch (err) {
        await client.query('ROLLBACK');
        throw err;
      }
    } finally {
      client.release();
    }
  };
  return {
    name: 'pg',
    commit: (write) => inTransaction(write, 'COMMIT'),
    rollBack: (write) => inTransaction(write, 'ROLLBACK'),
    throwInside: (write) => inTransaction(write, 'throw'),
    outside: async () => pgExecutor(pool as never),
    close: async () => {},
  };
}

function drizzleCase(): ClientCase {
  const orm = drizzle(pool);
  type DrizzleTx = Parameters<Parameters<typeof orm.transaction>[0]>[0];
  const business = (tx: DrizzleTx) => async (id: string) => {
    await tx.execute(sql`INSERT INTO client_order (order_id, client) VALUES (${id}, 'drizzle')`);
  };
  return {
    name: 'drizzle',
    commit: (write) => orm.transaction((tx) => write(drizzleExecutor(tx), business(tx))),
    rollBack: async (write) => {
      await orm
        .transaction(async (tx) => {
          await write(drizzleExecutor(tx), business(tx));
          tx.rollback();
        })
        .catch((e: unknown) => assert.ok(e instanceof TransactionRollbackError, String(e)));
    },
    throwInside: (write) => orm.transaction((tx) => write(drizzleExecutor(tx), business(tx)).then(failing)),
    outside: async () => drizzleExecutor(orm as never),
    close: async () => {},
  };
}

interface KyselyDb {
  client_order: { order_id: string; client: string };
}

function kyselyCase(): ClientCase {
  const k = new Kysely<KyselyDb>({ dialect: new PostgresDialect({ pool }) });
  type Trx = Parameters<Parameters<ReturnType<typeof k.transaction>['execute']>[0]>[0];
  const business = (trx: Trx) => async (id: string) => {
    await trx.insertInto('client_order').values({ order_id: id, client: 'kysely' }).execute();
  };
  return {
    name: 'kysely',
    commit: (write) => k.transaction().execute((trx) => write(kyselyExecutor(trx), business(trx))),
    rollBack: async (write) => {
      const trx = await k.startTransaction().execute();
      await write(kyselyExecutor(trx), business(trx));
      await trx.rollback().execute();
    },
    throwInside: (write) => k.transaction().execute((trx) => write(kyselyExecutor(trx), business(trx)).then(failing)),
    outside: async () => kyselyExecutor(k as never),
    // The pool is the file's own: Kysely's destroy would end it.
    close: async () => {},
  };
}

/** Prisma's client is generated from fixtures/schema.prisma first (prisma-client.ts). */
async function prismaCase(): Promise<ClientCase> {
  const { PrismaClient } = await generatedPrismaClient();
  const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: db.url }) });
  const business = (tx: ExamplePrismaTx) => async (id: string) => {
    await tx.clientOrder.create({ data: { order_id: id, client: 'prisma' } });
  };
  return {
    name: 'prisma',
    commit: (write) => prisma.$transaction((tx) => write(prismaExecutor(tx), business(tx))),
    // Prisma's interactive transaction rolls back when its function rejects: that is its own rollback.
    rollBack: async (write) => {
      await prisma
        .$transaction(async (tx) => {
          await write(prismaExecutor(tx), business(tx));
          throw new RollBack();
        })
        .catch((e: unknown) => assert.ok(e instanceof RollBack));
    },
    throwInside: (write) => prisma.$transaction((tx) => write(prismaExecutor(tx), business(tx)).then(failing)),
    outside: async () => prismaExecutor(prisma as never),
    close: () => prisma.$disconnect(),
  };
}

class RollBack extends Error {}

async function typeormCase(): Promise<ClientCase> {
  const source = new DataSource({ type: 'postgres', url: db.url, entities: [], poolSize: 2 });
  await source.initialize();
  type Manager = typeof source.manager;
  const business = (manager: Manager) => async (id: string) => {
    await manager.query(`INSERT INTO client_order (order_id, client) VALUES ($1, 'typeorm')`, [id]);
  };
  return {
    name: 'typeorm',
    commit: (write) => source.transaction((manager) => write(typeormExecutor(manager), business(manager))),
    rollBack: async (write) => {
      const runner = source.createQueryRunner();
      await runner.connect();
      try {
        await runner.startTransaction();
        await write(typeormExecutor(runner.manager), business(runner.manager));
        await runner.rollbackTransaction();
      } finally {
        await runner.release();
      }
    },
    throwInside: (write) =>
      source.transaction((manager) => write(typeormExecutor(manager), business(manager)).then(failing)),
    outside: async () => typeormExecutor(source.manager),
    close: () => source.destroy(),
  };
}
