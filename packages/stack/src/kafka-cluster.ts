import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import kafkajs from 'kafkajs';
import { redactUrl } from '@postbox/engine';
import { formatAddress, type HostPort } from './ports.ts';
import type { StackPaths } from './paths.ts';

/**
 * One node of a KRaft cluster of `brokers` combined broker+controller nodes (kafka.ts builds its service). Every
 * node of a cluster is formatted with the one id in `clusterIdFile` and the same static `voters`: a node formatted
 * with another id, or with `--initial-controllers` (a dynamic quorum), would never join the others.
 */
export interface KafkaClusterNode {
  /** node.id, 1-based. */
  id: number;
  /** controller.quorum.voters: `1@host:port,2@host:port,…`, the same string on every node. */
  voters: string;
  /** The cluster's size: replication factors and ISR minimums follow it. */
  brokers: number;
  /** Holds the cluster id; the first node to start writes it, the others (and every restart) read it. */
  clusterIdFile: string;
}

/**
 * JVM options of a cluster node. Three JVMs share two cores here: one GC thread each keeps a collection from taking
 * both, and two compiler threads keep the warm-up from starving the other nodes' heartbeats (a starved controller
 * fences live brokers, KAFKA-15019). The heap is the single broker's minus what three of them cannot afford.
 */
export const CLUSTER_JVM_OPTIONS = [
  '-Xms384m',
  '-Xmx512m',
  '-XX:+UseG1GC',
  '-XX:ParallelGCThreads=1',
  '-XX:ConcGCThreads=1',
  '-XX:CICompilerCount=2',
  '-XX:MaxMetaspaceSize=128m',
  '-XX:+ExitOnOutOfMemoryError',
];

/** The stack's cluster ports: node i's broker on 19i92, its controller on 19i93 (the single broker keeps 19092). */
export function stackClusterPorts(id: number): { broker: HostPort; controller: HostPort } {
  return {
    broker: { host: '127.0.0.1', port: 19_092 + id * 100 },
    controller: { host: '127.0.0.1', port: 19_093 + id * 100 },
  };
}

/** controller.quorum.voters for controllers 1..n at these addresses. */
export function quorumVoters(controllers: HostPort[]): string {
  return controllers.map((c, i) => `${i + 1}@${formatAddress(c)}`).join(',');
}

/**
 * The server.properties lines that differ between one broker and a node of a cluster. A cluster of 3 keeps every
 * acknowledged record on two nodes (min.insync.replicas=2 with acks=all) and never elects a replica that missed
 * records (unclean election off); its internal topics are replicated the same way. replica.fetch.max.bytes must be
 * ≥ message.max.bytes, or a record near the 2 MiB limit is never replicated and its partition's ISR shrinks to the
 * leader — which min.insync.replicas=2 then refuses to write to.
 */
export function replicationProperties(node?: KafkaClusterNode): string {
  if (!node)
    return `offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
`;
  const rf = Math.min(3, node.brokers);
  const isr = Math.min(2, rf);
  return `default.replication.factor=${rf}
min.insync.replicas=${isr}
unclean.leader.election.enable=false
offsets.topic.replication.factor=${rf}
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=${rf}
transaction.state.log.min.isr=${isr}
transaction.state.log.num.partitions=6
replica.lag.time.max.ms=10000
replica.fetch.max.bytes=2097152
# Threads for two shared cores (defaults: 3 network, 8 io, 10 background).
num.network.threads=2
num.io.threads=2
background.threads=2
num.replica.fetchers=1
log.cleaner.threads=1
# Test consumers use short sessions (3-6 s); the broker's default minimum is 6 s.
group.min.session.timeout.ms=1000
`;
}

/**
 * The cluster's id: read from `file`, or made and written there when the file does not exist yet. The id is
 * written whole to a file of its own, then linked to `file` — a link fails if `file` exists, and never shows a
 * half-written one — so nodes starting together (in one process or several) agree on the first id linked.
 */
export async function clusterIdOf(file: string): Promise<string> {
  const existing = (await fs.readFile(file, 'utf8').catch(() => '')).trim();
  if (existing) return existing;
  await fs.mkdir(path.dirname(file), { recursive: true });
  const mine = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
  await fs.writeFile(mine, `${newClusterId()}\n`);
  try {
    await fs.link(mine, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    await fs.rm(mine, { force: true });
  }
  return (await fs.readFile(file, 'utf8')).trim();
}

/**
 * Kafka's Uuid as StorageTool random-uuid prints it (16 random bytes, URL-safe base64 without padding), without a
 * JVM start: Kafka refuses ids that begin with '-' (they read as command-line options) and the all-zero one.
 */
function newClusterId(): string {
  for (;;) {
    const id = randomBytes(16).toString('base64url');
    if (!id.startsWith('-') && id !== 'AAAAAAAAAAAAAAAAAAAAAA') return id;
  }
}

/** Node i's files under `<home>/kafka-<i>/`; the jars stay the single broker's (downloaded once). */
export function kafkaNodePaths(paths: StackPaths, id: number): StackPaths {
  const dir = path.join(paths.home, `kafka-${id}`);
  const data = path.join(dir, 'data');
  return {
    ...paths,
    kafka: {
      ...paths.kafka,
      dir,
      data,
      metaProperties: path.join(data, 'meta.properties'),
      serverProperties: path.join(dir, 'server.properties'),
      log4jProperties: path.join(dir, 'log4j.properties'),
      log: path.join(dir, 'kafka.log'),
      stdoutLog: path.join(dir, 'kafka.out'),
      pidFile: path.join(dir, 'kafka.pid'),
    },
  };
}

/** Where the stack's cluster keeps its id (`up --kafka-brokers 3`). */
export function stackClusterIdFile(paths: StackPaths): string {
  return path.join(paths.home, 'kafka-cluster.id');
}

/**
 * The cluster as clients see it: resolves once the metadata of `bootstrap` lists `brokers` live brokers (each one
 * registered and unfenced), or throws saying which it lists.
 */
export async function kafkaClusterAnswers(bootstrap: string[], brokers: number): Promise<void> {
  const live = await liveBrokerIds(bootstrap);
  if (live.length < brokers)
    throw new Error(
      `kafka at ${redactUrl(bootstrap.join(','))} lists ${live.length} of ${brokers} brokers (${live.join(', ') || 'none'})`,
    );
}

/** A node is ready once its own metadata lists it: registered with the quorum and unfenced. */
export async function kafkaNodeAnswers(url: string, id: number): Promise<void> {
  const live = await liveBrokerIds([url]);
  if (!live.includes(id))
    throw new Error(`kafka node ${id} at ${url} is not a live broker yet (live: ${live.join(', ') || 'none'})`);
}

/** The node ids of the live brokers, as the metadata of `bootstrap` lists them. */
export async function liveBrokerIds(bootstrap: string[]): Promise<number[]> {
  const admin = new kafkajs.Kafka({
    clientId: 'postbox-stack',
    brokers: bootstrap,
    logLevel: kafkajs.logLevel.NOTHING,
    connectionTimeout: 2000,
    requestTimeout: 5000,
    retry: { retries: 0 },
  }).admin();
  try {
    await admin.connect();
    const cluster = await admin.describeCluster();
    return cluster.brokers.map((b) => b.nodeId).sort((a, b) => a - b);
  } finally {
    await admin.disconnect();
  }
}
