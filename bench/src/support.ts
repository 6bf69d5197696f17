import { randomBytes } from 'node:crypto';
import { connect, enqueueMany, migrate, type EventInput, type Sql } from '@postbox/engine';
import { stackEnv } from '@postbox/api/stack';
import { Kafka, logLevel } from 'kafkajs';

export const stack = stackEnv();

/** A migrated database of its own for one bench run, dropped afterwards. */
export async function benchDatabase(): Promise<{ url: string; sql: Sql; drop(): Promise<void> }> {
  const name = `bench_${randomBytes(4).toString('hex')}`;
  const admin = connect({ url: stack.DATABASE_URL, max: 1 });
  await admin.unsafe(`CREATE DATABASE ${name}`);
  await admin.end();
  const u = new URL(stack.DATABASE_URL);
  u.pathname = `/${name}`;
  const url = u.toString();
  const sql = connect({ url, max: 8, applicationName: 'postbox-bench' });
  await migrate(sql);
  return {
    url,
    sql,
    async drop() {
      await sql.end({ timeout: 5 });
      const a = connect({ url: stack.DATABASE_URL, max: 1 });
      await a.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await a.end();
    },
  };
}

export function kafkaClient(): Kafka {
  return new Kafka({ clientId: 'postbox-bench', brokers: stack.KAFKA_BROKERS.split(','), logLevel: logLevel.NOTHING });
}

export async function createTopic(topic: string, partitions: number): Promise<void> {
  const admin = kafkaClient().admin();
  await admin.connect();
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }] });
  await admin.disconnect();
}

export const payload = (bytes: number) => ({ pad: 'x'.repeat(Math.max(0, bytes - 12)) });

/** Pre-fills the outbox with `events` rows over `aggregates` aggregates, 1000 rows a statement. */
export async function fillOutbox(sql: Sql, topic: string, events: number, bytes: number, progress: (done: number) => void): Promise<void> {
  const aggregates = Math.max(1, Math.floor(events / 10));
  const data = payload(bytes);
  for (let start = 0; start < events; start += 1000) {
    const batch: EventInput[] = [];
    for (let i = start; i < Math.min(events, start + 1000); i++) {
      batch.push({ event_type: 'BenchEvent', aggregate_id: `a-${i % aggregates}`, aggregate_version: Math.floor(i / aggregates) + 1, data });
    }
    await sql.begin((tx) => enqueueMany(tx, batch, { topic, producer: 'bench' }));
    progress(Math.min(events, start + 1000));
  }
}

export function progressBar(label: string, total: number): (done: number) => void {
  let last = -1;
  return (done) => {
    const pct = Math.floor((done / total) * 100);
    if (pct === last) return;
    last = pct;
    const filled = Math.round(pct / 4);
    process.stderr.write(`\r${label.padEnd(28)} [${'#'.repeat(filled)}${'.'.repeat(25 - filled)}] ${pct}% ${done}/${total}`);
    if (done >= total) process.stderr.write('\n');
  };
}
