import { PrismaPg } from '@prisma/adapter-pg';
import { sql as drizzleSql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { enqueue, type EventInput, type Tx } from '@postbox/engine';
import { drizzleExecutor } from '@postbox/engine/drizzle';
import { kyselyExecutor } from '@postbox/engine/kysely';
import { pgExecutor } from '@postbox/engine/pg';
import { prismaExecutor } from '@postbox/engine/prisma';
import { typeormExecutor } from '@postbox/engine/typeorm';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchDatabase, perSecond, progressBar, timed, type BenchDatabase } from '../support.ts';
import { startCpuMeter } from '../workload/cpu.ts';
// The suite's generated Prisma client (generated on first use): one schema for tests and bench.
import { generatedPrismaClient } from '../../../test/src/clients/prisma-client.ts';

const CONNECTIONS = 8;

/** One client's write: its business row and its event, in one transaction of that client. */
type Place = (id: string, event: EventInput) => Promise<void>;

interface ClientWriter {
  name: string;
  place: Place;
  close(): Promise<void>;
}

/**
 * Issue 25's bench line: what an event costs to write through each client's adapter, beside postgres.js in the
 * same run. Each client places orders at CONNECTIONS concurrent transactions for one window: an order row (written
 * with the client's own API) and its event through `enqueue`, committed together. Reported: events/s, the bench
 * process's CPU per event (the client's own cost is in it), and the ratio to postgres.js.
 */
export async function clientsScenario({ options, report }: Bench): Promise<void> {
  const db = await benchDatabase(CONNECTIONS + 2);
  await db.sql`CREATE TABLE client_order (id text PRIMARY KEY, total integer NOT NULL)`;
  const data = { pad: 'x'.repeat(Math.max(0, options.payload - 10)) };
  const byClient: Record<string, { eventsPerSecond: number; cpuMicrosecondsPerEvent: number }> = {};
  try {
    for (const make of WRITERS) {
      const writer = await make(db);
      try {
        let n = 0;
        const cpu = startCpuMeter({ producer: true });
        const run = await timed(
          CONNECTIONS,
          options.windowMs,
          async () => {
            const id = `${writer.name}-${n++}`;
            await writer.place(id, { event_type: 'OrderPlaced', aggregate_id: id, aggregate_version: 1, data });
            return 1;
          },
          progressBar(`enqueue through ${writer.name}`, options.windowMs),
        );
        byClient[writer.name] = {
          eventsPerSecond: perSecond(run.done, run.seconds),
          cpuMicrosecondsPerEvent: cpu.perEvent(run.done).producer ?? 0,
        };
      } finally {
        await writer.close();
      }
    }
  } finally {
    await db.drop();
  }
  const baseline = byClient['postgres.js']!.eventsPerSecond;
  report.results.scenarios.clients = { connections: CONNECTIONS, windowMs: options.windowMs, byClient };
  for (const [name, r] of Object.entries(byClient))
    report.row(
      'clients',
      `enqueue through ${name}`,
      rate(r.eventsPerSecond),
      name === 'postgres.js' ? [] : [['postgres.js', r.eventsPerSecond / baseline]],
      `order row + event per transaction, ${CONNECTIONS} connections; bench CPU ${Math.round(r.cpuMicrosecondsPerEvent).toLocaleString('en-US')} µs per event`,
    );
}

const TOPIC = { topic: 'bench.clients', producer: 'bench' };

const WRITERS: Array<(db: BenchDatabase) => Promise<ClientWriter>> = [
  async (db) => ({
    name: 'postgres.js',
    place: (id, event) =>
      db.sql
        .begin(async (tx: Tx) => {
          await tx`INSERT INTO client_order (id, total) VALUES (${id}, 100)`;
          await enqueue(tx, event, TOPIC);
        })
        .then(() => {}),
    close: async () => {},
  }),
  async (db) => {
    const pool = new pg.Pool({ connectionString: db.url, max: CONNECTIONS });
    return {
      name: 'pg',
      place: async (id, event) => {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          await client.query('INSERT INTO client_order (id, total) VALUES ($1, 100)', [id]);
          await enqueue(pgExecutor(client), event, TOPIC);
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK');
          throw err;
        } finally {
          client.release();
        }
      },
      close: () => pool.end(),
    };
  },
  async (db) => {
    const pool = new pg.Pool({ connectionString: db.url, max: CONNECTIONS });
    const orm = drizzle(pool);
    return {
      name: 'drizzle',
      place: (id, event) =>
        orm.transaction(async (tx) => {
          await tx.execute(drizzleSql`INSERT INTO client_order (id, total) VALUES (${id}, 100)`);
          await enqueue(drizzleExecutor(tx), event, TOPIC);
        }),
      close: () => pool.end(),
    };
  },
  async (db) => {
    const k = new Kysely<{ client_order: { id: string; total: number } }>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: CONNECTIONS }) }),
    });
    return {
      name: 'kysely',
      place: (id, event) =>
        k.transaction().execute(async (trx) => {
          await trx.insertInto('client_order').values({ id, total: 100 }).execute();
          await enqueue(kyselyExecutor(trx), event, TOPIC);
        }),
      close: () => k.destroy(),
    };
  },
  async (db) => {
    const { PrismaClient } = await generatedPrismaClient();
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: db.url, max: CONNECTIONS }) });
    return {
      name: 'prisma',
      place: (id, event) =>
        prisma.$transaction(async (tx) => {
          await tx.$queryRawUnsafe('INSERT INTO client_order (id, total) VALUES ($1, 100)', id);
          await enqueue(prismaExecutor(tx), event, TOPIC);
        }),
      close: () => prisma.$disconnect(),
    };
  },
  async (db) => {
    const source = new DataSource({ type: 'postgres', url: db.url, entities: [], poolSize: CONNECTIONS });
    await source.initialize();
    return {
      name: 'typeorm',
      place: (id, event) =>
        source.transaction(async (manager) => {
          await manager.query('INSERT INTO client_order (id, total) VALUES ($1, 100)', [id]);
          await enqueue(typeormExecutor(manager), event, TOPIC);
        }),
      close: () => source.destroy(),
    };
  },
];
