import { readFile, readdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect } from '@postbox/engine';
import { createKafka } from '@postbox/engine/kafka';
import { connectNats } from '@postbox/engine/nats';
import { Redis } from 'ioredis';
import type { ConfigResourceTypes } from 'kafkajs';
import type { BenchBroker } from './brokers.ts';
import { kafka, nats, redact, stack } from './support.ts';
import { kafkaPublisherClient } from './brokers.ts';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
// kafkajs is CommonJS and its enums are not named exports under ESM: the protocol value of a broker resource.
const BROKER_RESOURCE = 4 as ConfigResourceTypes;

/** Versions and durability settings, read back from the running servers (never assumed from our config alone). */
export interface Environment {
  machine: {
    hostname: string;
    cpus: number;
    cpuModel: string;
    memoryGiB: number;
    os: string;
    loadAverageAtStart: number[];
    loadAverageAtEnd?: number[];
  };
  versions: Record<string, string>;
  durability: {
    postgres: Record<string, string>;
    kafka: Record<string, string | number | boolean>;
    redis: Record<string, string>;
    /** With `--broker nats` only. */
    nats?: Record<string, string>;
    /** With `--broker rabbitmq` only. */
    rabbitmq?: Record<string, string>;
  };
  services: { postgres: string; kafka: string; redis: string };
}

export async function readEnvironment(brokers: readonly BenchBroker[]): Promise<Environment> {
  const [pg, kf, rd, libs, nt] = await Promise.all([
    postgresSettings(),
    kafkaSettings(),
    redisSettings(),
    libraryVersions(),
    brokers.includes('nats') ? natsSettings() : null,
  ]);
  const rq = brokers.includes('rabbitmq') ? RABBITMQ_SETTINGS : null;
  const cpus = os.cpus();
  return {
    machine: {
      hostname: os.hostname(),
      cpus: cpus.length,
      cpuModel: cpus[0]?.model ?? 'unknown',
      memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
      os: `${os.type()} ${os.release()}`,
      loadAverageAtStart: os.loadavg().map((l) => Math.round(l * 100) / 100),
    },
    versions: {
      node: process.version,
      postgres: pg.version,
      kafka: kf.version,
      redis: rd.version,
      ...(nt ? { nats: nt.version } : {}),
      ...libs,
    },
    durability: {
      postgres: pg.settings,
      kafka: kf.settings,
      redis: rd.settings,
      ...(nt ? { nats: nt.settings } : {}),
      ...(rq ? { rabbitmq: rq } : {}),
    },
    services: { postgres: redact(stack.DATABASE_URL), kafka: stack.KAFKA_BROKERS, redis: redact(stack.REDIS_URL) },
  };
}

/** How the RabbitMQ adapter stores (topology.ts, publisher.ts): the same in every run. */
const RABBITMQ_SETTINGS = {
  queues: 'quorum, one per (group, partition), single-active-consumer',
  // Quorum queues fsync their log before a publisher confirm.
  messages: 'persistent, mandatory, publisher confirm awaited per message',
};

/** With `--broker nats`: the server's version and how the bench's streams store. */
async function natsSettings(): Promise<{ version: string; settings: Record<string, string> }> {
  const nc = await connectNats(nats);
  try {
    return {
      version: nc.info?.version ?? 'unknown',
      settings: {
        jetstream: String(nc.info?.jetstream ?? false),
        // ensureStreams: file storage, one replica; nats-server 2.9 has no per-message fsync (sync_interval is 2.10+).
        storage: 'file',
        replicas: '1',
        publish: 'PubAck awaited per message',
      },
    };
  } finally {
    await nc.close();
  }
}

async function postgresSettings(): Promise<{ version: string; settings: Record<string, string> }> {
  const sql = connect({ url: stack.DATABASE_URL, max: 1, applicationName: 'postbox-bench-env' });
  try {
    const names = [
      'fsync',
      'synchronous_commit',
      'wal_sync_method',
      'full_page_writes',
      'wal_level',
      'shared_buffers',
      'max_wal_size',
    ];
    const rows = await sql<
      { name: string; setting: string; unit: string | null }[]
    >`SELECT name, setting, unit FROM pg_settings WHERE name = ANY(${names})`;
    const [v] = await sql<{ server_version: string }[]>`SHOW server_version`;
    return {
      version: v!.server_version,
      settings: Object.fromEntries(rows.map((r) => [r.name, r.unit ? `${r.setting} ${r.unit}` : r.setting])),
    };
  } catch (cause) {
    throw new Error(`bench: could not read PostgreSQL settings from ${redact(stack.DATABASE_URL)}`, { cause });
  } finally {
    await sql.end({ timeout: 5 });
  }
}

async function kafkaSettings(): Promise<{ version: string; settings: Record<string, string | number | boolean> }> {
  const admin = createKafka(kafka).admin();
  try {
    await admin.connect();
    const cluster = await admin.describeCluster();
    const names = [
      'min.insync.replicas',
      'default.replication.factor',
      'unclean.leader.election.enable',
      'log.flush.interval.messages',
      'log.flush.interval.ms',
    ];
    const described = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: BROKER_RESOURCE, name: String(cluster.brokers[0]?.nodeId ?? 1), configNames: names }],
    });
    const broker = Object.fromEntries(
      (described.resources[0]?.configEntries ?? []).map((e) => [e.configName, e.configValue ?? 'null']),
    );
    return {
      version: await kafkaVersion(),
      settings: {
        // Every producer in the bench (the engine's two Kafka publishers, the raw baselines) sends with these two;
        // the engine hard-codes them.
        producerAcks: -1,
        producerIdempotent: true,
        // The client the pipeline scenarios' relays publish with (POSTBOX_KAFKA_PUBLISHER).
        relayPublisher: kafkaPublisherClient(),
        brokers: cluster.brokers.length,
        ...broker,
      },
    };
  } catch (cause) {
    throw new Error(`bench: could not read Kafka settings from ${stack.KAFKA_BROKERS}`, { cause });
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

/** The broker has no version API: the local stack's jar version, when the broker is ours. */
async function kafkaVersion(): Promise<string> {
  const libs = path.join(process.env.POSTBOX_HOME || path.join(REPO, '.postbox'), 'kafka', 'libs');
  const marker = await readFile(path.join(libs, '.postbox-kafka-version'), 'utf8').catch(() => null);
  if (marker) return marker.trim();
  const jar = (await readdir(libs).catch(() => [] as string[])).find((f) => /^kafka_[\d.]+-[\d.]+\.jar$/.test(f));
  return jar ? jar.replace(/^kafka_[\d.]+-|\.jar$/g, '') : 'unknown (external broker)';
}

async function redisSettings(): Promise<{ version: string; settings: Record<string, string> }> {
  const redis = new Redis(stack.REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1, enableOfflineQueue: false });
  try {
    await redis.connect();
    const info = await redis.info('server');
    const appendonly = (await redis.config('GET', 'appendonly')) as string[];
    const appendfsync = (await redis.config('GET', 'appendfsync')) as string[];
    return {
      version: /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown',
      settings: { appendonly: appendonly[1] ?? 'unknown', appendfsync: appendfsync[1] ?? 'unknown' },
    };
  } catch (cause) {
    throw new Error(`bench: could not read Redis settings from ${redact(stack.REDIS_URL)}`, { cause });
  } finally {
    redis.disconnect();
  }
}

async function libraryVersions(): Promise<Record<string, string>> {
  const names = ['kafkajs', 'postgres', 'piscina', 'bullmq', '@platformatic/kafka', 'pg-transactional-outbox'];
  const entries = await Promise.all(
    names.map(async (name) => {
      const text = await readFile(path.join(REPO, 'node_modules', name, 'package.json'), 'utf8').catch(() => null);
      return [
        name === 'postgres' ? 'postgres.js' : name,
        text ? (JSON.parse(text) as { version: string }).version : 'not installed',
      ] as const;
    }),
  );
  return Object.fromEntries(entries);
}
