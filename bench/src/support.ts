import { randomBytes } from 'node:crypto';
import { migrateDemo } from '@postbox/api/demo';
import { connect, migrate, type Sql } from '@postbox/engine';
import { createKafka, ensureTopics, parseBrokers, type KafkaConnection } from '@postbox/engine/kafka';
import {
  connectNats,
  ensureStreams,
  parseNatsServers,
  streamName,
  type NatsConnectionOptions,
} from '@postbox/engine/nats';
import { jetstreamManager } from '@nats-io/jetstream';
import { stackEnv } from '@postbox/stack';

export const stack = stackEnv();
export const kafka: KafkaConnection = { brokers: parseBrokers(stack.KAFKA_BROKERS), clientId: 'postbox-bench' };

/**
 * Points the run at other Kafka brokers (the stack's cluster, `--kafka-brokers 3`): this process's clients and
 * every role it spawns afterwards; refuses unless `expected` brokers are live there.
 */
export async function useKafkaBrokers(list: string, expected: number): Promise<void> {
  stack.KAFKA_BROKERS = list;
  kafka.brokers = parseBrokers(list);
  process.env.KAFKA_BROKERS = list;
  // A KAFKA_BROKERS set in the environment wins over the stack's cluster: figures labelled replicated must be.
  const admin = createKafka(kafka).admin();
  try {
    await admin.connect();
    const live = (await admin.describeCluster()).brokers.length;
    if (live !== expected)
      throw new Error(
        `bench: --kafka-brokers ${expected}, but ${list} has ${live} live broker(s) (unset KAFKA_BROKERS?)`,
      );
  } finally {
    await admin.disconnect().catch(() => {});
  }
}
export const nats: NatsConnectionOptions = { servers: parseNatsServers(stack.NATS_URL), name: 'postbox-bench' };

/** A migrated database of its own for one measurement, dropped by drop() (and by the suite's cleanup). */
export interface BenchDatabase {
  name: string;
  url: string;
  sql: Sql;
  drop(): Promise<void>;
}

const liveDatabases = new Set<BenchDatabase>();
const liveTopics = new Set<string>();
const liveGroups = new Set<string>();

/** A consumer group the bench created; deleted at the end of the run (Kafka keeps empty groups otherwise). */
export function trackGroup(groupId: string): string {
  liveGroups.add(groupId);
  return groupId;
}

export const uniqueName = (prefix: string) => `${prefix}_${randomBytes(4).toString('hex')}`;

export async function benchDatabase(max = 8): Promise<BenchDatabase> {
  const name = uniqueName('bench');
  await withAdmin((admin) => admin.unsafe(`CREATE DATABASE ${name}`), `create database ${name}`);
  const u = new URL(stack.DATABASE_URL);
  u.pathname = `/${name}`;
  const url = u.toString();
  const sql = connect({ url, max, applicationName: 'postbox-bench' });
  let dropped: Promise<void> | null = null;
  const db: BenchDatabase = {
    name,
    url,
    sql,
    drop() {
      dropped ??= (async () => {
        liveDatabases.delete(db);
        await sql.end({ timeout: 5 }).catch(() => {});
        await withAdmin(
          (admin) => admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`),
          `drop database ${name}`,
        );
      })();
      return dropped;
    },
  };
  liveDatabases.add(db);
  try {
    await migrate(sql);
    await migrateDemo(sql);
  } catch (cause) {
    await db.drop().catch(() => {});
    throw new Error(`bench: could not migrate database ${name}`, { cause });
  }
  return db;
}

async function withAdmin<T>(fn: (admin: Sql) => Promise<T>, what: string): Promise<T> {
  const admin = connect({ url: stack.DATABASE_URL, max: 1, applicationName: 'postbox-bench-admin' });
  try {
    return await fn(admin);
  } catch (cause) {
    throw new Error(`bench: could not ${what} on ${redact(stack.DATABASE_URL)}`, { cause });
  } finally {
    await admin.end({ timeout: 5 });
  }
}

export const redact = (url: string) => url.replace(/\/\/([^:@/]+):[^@/]+@/, '//$1:***@');

/**
 * A topic of its own, deleted by deleteTopic() (and by the suite's cleanup). Replicated on every live broker, at
 * most 3 (as Postbox's ensureTopics does): on a cluster the figures include replication.
 */
export async function benchTopic(prefix: string, partitions: number): Promise<string> {
  const topic = `bench.${prefix}.${randomBytes(4).toString('hex')}`;
  // Postbox's own creation: replicas from the live brokers (at most 3), leaders awaited across a cluster.
  await ensureTopics(kafka, [{ topic, partitions }]).catch((cause: unknown) => {
    throw new Error(`bench: could not create topic ${topic} on ${kafka.brokers.join(',')}`, { cause });
  });
  liveTopics.add(topic);
  return topic;
}

export async function deleteTopics(topics: string[]): Promise<void> {
  if (topics.length === 0) return;
  const admin = createKafka(kafka).admin();
  try {
    await admin.connect();
    await admin.deleteTopics({ topics, timeout: 10_000 });
    for (const t of topics) liveTopics.delete(t);
  } catch (cause) {
    throw new Error(`bench: could not delete topics ${topics.join(', ')}`, { cause });
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

/** Drops every database, topic and consumer group still alive (the end of a run, or after a failure). */
export async function cleanupAll(): Promise<string[]> {
  const problems: string[] = [];
  for (const db of [...liveDatabases])
    await db.drop().catch((e: Error) => problems.push(`${e.message}: ${String(e.cause)}`));
  await deleteTopics([...liveTopics]).catch((e: Error) => problems.push(`${e.message}: ${String(e.cause)}`));
  await deleteGroups([...liveGroups]).catch((e: Error) => problems.push(`${e.message}: ${String(e.cause)}`));
  return problems;
}

async function deleteGroups(groups: string[]): Promise<void> {
  if (groups.length === 0) return;
  const admin = createKafka(kafka).admin();
  try {
    await admin.connect();
    const results = await admin
      .deleteGroups(groups)
      .catch((e: { groups?: Array<{ groupId: string; errorCode: number; error?: { type?: string } }> }) => {
        if (!e.groups) throw e;
        return e.groups;
      });
    for (const g of groups) liveGroups.delete(g);
    // A group that never committed an offset may be gone already; anything else is worth saying.
    const failed = results.filter((r) => r.errorCode !== 0 && r.error?.type !== 'GROUP_ID_NOT_FOUND');
    if (failed.length > 0)
      throw new Error(failed.map((r) => `${r.groupId}: ${r.error?.type ?? r.errorCode}`).join(', '));
  } catch (cause) {
    throw new Error(`bench: could not delete consumer groups ${groups.join(', ')}`, { cause });
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Waits until probe() is true, checking every `everyMs`; throws, naming `what`, after timeoutMs. */
export async function until(
  probe: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs: number,
  everyMs = 25,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`bench: timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** A progress bar on stderr; call with the number done. */
export function progressBar(label: string, total: number): (done: number) => void {
  let last = -1;
  const tty = process.stderr.isTTY;
  return (done) => {
    const pct = Math.min(100, Math.floor((done / Math.max(1, total)) * 100));
    if (pct === last || (!tty && pct % 25 !== 0 && done < total)) return;
    last = pct;
    const filled = Math.round(pct / 4);
    const line = `${label.slice(0, 40).padEnd(40)} [${'#'.repeat(filled)}${'.'.repeat(25 - filled)}] ${String(pct).padStart(3)}% ${done}/${total}`;
    process.stderr.write(tty ? `\r${line}${done >= total ? '\n' : ''}` : `${line}\n`);
  };
}

/**
 * Runs `worker` on `concurrency` loops until `ms` passed; returns completed operations and seconds. Each loop
 * runs once before the clock starts (connections opened, statements prepared): not counted.
 */
export async function timed(
  concurrency: number,
  ms: number,
  worker: (loop: number) => Promise<number>,
  progress?: (done: number) => void,
): Promise<{ done: number; seconds: number }> {
  await Promise.all(Array.from({ length: concurrency }, (_, loop) => worker(loop)));
  let done = 0;
  const started = performance.now();
  const deadline = started + ms;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, loop) => {
      while (performance.now() < deadline) {
        const n = await worker(loop); // not `done += await …`: that reads `done` before the await and loses updates
        done += n;
        progress?.(Math.min(ms, Math.round(performance.now() - started)));
      }
    }),
  );
  progress?.(ms);
  return { done, seconds: (performance.now() - started) / 1000 };
}

export const perSecond = (events: number, seconds: number) => (seconds > 0 ? events / seconds : 0);

/** A NATS topic of its own for one measurement: one JetStream stream per partition, removed by drop(). */
export interface NatsBenchTopic {
  topic: string;
  partitions: Map<string, number>;
  drop(): Promise<void>;
}

export async function natsBenchTopic(prefix: string, partitions: number): Promise<NatsBenchTopic> {
  const topic = `bench.${prefix}.${randomBytes(4).toString('hex')}`;
  const counts = await ensureStreams(nats, [{ topic, partitions }]).catch((cause: unknown) => {
    throw new Error(`bench: could not create the streams of ${topic} on ${nats.servers.join(',')}`, { cause });
  });
  return {
    topic,
    partitions: counts,
    async drop() {
      const nc = await connectNats(nats);
      try {
        const jsm = await jetstreamManager(nc);
        for (let p = 0; p < partitions; p++) await jsm.streams.delete(streamName(topic, p)).catch(() => false);
      } finally {
        await nc.close();
      }
    },
  };
}
