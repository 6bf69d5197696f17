import fs from 'node:fs/promises';
import path from 'node:path';
import kafkajs from 'kafkajs';
import {
  kafkaClusterAnswers,
  liveBrokerIds,
  quorumVoters,
  stackClusterIdFile,
  type KafkaClusterNode,
} from './kafka-cluster.ts';
import { clusterNodeService, netnsNodeService, type ClusterNodeSpec } from './netns-node.ts';
import { stackPaths } from './paths.ts';
import { freePort, waitUntil, type HostPort } from './ports.ts';
import { withSharedJars, wrap, type PrivateServer } from './private.ts';
import { quorumLeader } from './quorum-leader.ts';

/** One node of a private cluster: a private server that also knows its node id. */
export interface PrivateClusterNode extends PrivateServer {
  /** node.id (1-based), as leaderOf() and controllerLeader() name nodes. */
  readonly id: number;
  /** Sends `signal` (SIGKILL unless said) and waits until the process is gone. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again after a kill or stop; resolves once the cluster lists it as a live broker. */
  restart(timeoutMs?: number): Promise<void>;
}

/** How healthy the partitions of some topics are, as the cluster's metadata says. */
export interface PartitionHealth {
  /** Partitions whose ISR is smaller than their replica set. */
  underReplicated: number;
  /** Partitions without a leader (-1): neither readable nor writable. */
  offline: number;
  /** The smallest ISR among each topic's partitions. */
  minIsr: Map<string, number>;
}

/**
 * A private KRaft cluster of `brokers` combined broker+controller nodes on free loopback ports (or each on an
 * address of its own, in a network namespace of its own: `hosts`), for tests that kill, stop, pause or partition
 * its nodes (the stack's own cluster is never touched): the stack's node settings (kafka.ts with a
 * KafkaClusterNode), one cluster id, static voters, the stack's cached jars. Detached like every private server:
 * the caller must `stop()` it, kill its pids should the caller die, and remove `home`.
 */
export interface PrivateKafkaCluster {
  readonly home: string;
  /** KAFKA_BROKERS: every node's address, comma-separated. */
  readonly url: string;
  readonly nodes: readonly PrivateClusterNode[];
  /** Node `id` (1-based). */
  node(id: number): PrivateClusterNode;
  /** Starts every node together; resolves once the cluster lists all of them as live brokers. */
  start(timeoutMs?: number): Promise<void>;
  /** Resolves once the cluster lists `count` live brokers (all, unless said). */
  waitForBrokers(count?: number, timeoutMs?: number): Promise<void>;
  /**
   * The node id leading `partition` of `topic` (-1: none), as the metadata of the nodes `via` says (all unless
   * said: a node cut from its peers still names itself the leader of what it led).
   */
  leaderOf(topic: string, partition: number, via?: number[]): Promise<number>;
  /** The ids of the live (registered, unfenced) brokers, as the metadata of the nodes `via` lists them. */
  liveBrokers(via?: number[]): Promise<number[]>;
  /**
   * The node id of the metadata quorum's leader: the active controller (Admin.describeMetadataQuorum), asked
   * through the nodes `via` (all unless said: a stopped node in the bootstrap list can hang the request).
   */
  controllerLeader(via?: number[]): Promise<number>;
  partitionHealth(topics: string[]): Promise<PartitionHealth>;
  /** SIGCONT then SIGKILL to every node still running, and waits for each exit: the data is thrown away. */
  stop(): Promise<void>;
}

/** Where one node runs: the address it listens on and advertises (all its listeners), and its namespace. */
export interface ClusterNodeHost {
  /** The one address of the node's client, controller and inter-broker listeners. */
  address: string;
  /**
   * A network namespace (`ip netns`, root only) holding `address`, which the node's process is started in; its
   * peers and clients reach it over that address, so rules inside the namespace can cut it from its peers alone.
   */
  netns?: string;
}

export interface PrivateClusterOptions {
  /** Broker and controller port of each node; free loopback ports unless given. */
  ports?: Array<{ broker: number; controller: number }>;
  /** Extra server.properties lines for every node. */
  properties?: string;
  /** Each node's address and namespace. @defaultValue every node on 127.0.0.1 in this namespace */
  hosts?: ClusterNodeHost[];
}

export async function privateKafkaCluster(
  home: string,
  brokers = 3,
  options: PrivateClusterOptions = {},
): Promise<PrivateKafkaCluster> {
  const ports = options.ports ?? (await freePortPairs(brokers));
  const hosts: ClusterNodeHost[] = options.hosts ?? ports.map(() => ({ address: '127.0.0.1' }));
  if (ports.length !== brokers || hosts.length !== brokers)
    throw new Error(
      `a cluster of ${brokers} needs ${brokers} port pairs and hosts, got ${ports.length}, ${hosts.length}`,
    );
  const paths = withSharedJars(stackPaths(home));
  const controllers = ports.map((p, i): HostPort => ({ host: hosts[i]!.address, port: p.controller }));
  const voters = quorumVoters(controllers);
  const clusterIdFile = stackClusterIdFile(paths);
  const urls = ports.map((p, i) => `${hosts[i]!.address}:${p.broker}`);
  const waitForBrokers = async (count = brokers, timeoutMs = 120_000) => {
    await waitUntil(() => kafkaClusterAnswers(urls, count), {
      what: `${count} live brokers in the private cluster at ${urls.join(',')}`,
      hint: `read ${path.join(home, 'kafka-<i>', 'kafka.log')}`,
      timeoutMs,
      intervalMs: 500,
    });
  };
  const nodes = ports.map((p, i): PrivateClusterNode => {
    const id = i + 1;
    const node: KafkaClusterNode = { id, voters, brokers, clusterIdFile };
    const { address, netns } = hosts[i]!;
    const spec: ClusterNodeSpec = {
      home,
      node,
      broker: { host: address, port: p.broker },
      controller: controllers[i]!,
      properties: options.properties ?? '',
    };
    const server = wrap(netns ? netnsNodeService(spec, netns) : clusterNodeService(spec), home);
    return {
      ...server,
      id,
      async kill(signal = 'SIGKILL') {
        await server.signal(signal);
        await server.waitForExit();
      },
      async restart(timeoutMs = 120_000) {
        await server.start(timeoutMs);
      },
    };
  });
  const through = (via?: number[]) => (via ? via.map((id) => urls[id - 1]!) : urls);
  const node = (id: number) => {
    const found = nodes[id - 1];
    if (!found) throw new Error(`the cluster has nodes 1..${brokers}, not ${id}`);
    return found;
  };
  return {
    home,
    url: urls.join(','),
    nodes,
    node,
    async start(timeoutMs = 180_000) {
      await fs.mkdir(home, { recursive: true });
      // Every start settles before a failure is thrown: the caller's stop() then finds each node that did start.
      const started = await Promise.allSettled(nodes.map((n) => n.start(timeoutMs)));
      const failed = started.find((r) => r.status === 'rejected');
      if (failed) throw failed.reason;
      await waitForBrokers(brokers, timeoutMs);
    },
    waitForBrokers,
    liveBrokers: (via) => liveBrokerIds(through(via)),
    async leaderOf(topic, partition, via) {
      const [meta] = await topicMetadata(through(via), [topic]);
      const found = meta?.partitions.find((x) => x.partitionId === partition);
      if (!found) throw new Error(`${topic} has no partition ${partition}`);
      return found.leader;
    },
    controllerLeader: (via = nodes.map((n) => n.id)) =>
      quorumLeader(
        paths.kafka.libs,
        home,
        via.map((id) => `${controllers[id - 1]!.host}:${controllers[id - 1]!.port}`).join(','),
      ),
    async partitionHealth(topics) {
      const health: PartitionHealth = { underReplicated: 0, offline: 0, minIsr: new Map() };
      for (const t of await topicMetadata(urls, topics)) {
        for (const p of t.partitions) {
          if (p.isr.length < p.replicas.length) health.underReplicated++;
          if (p.leader === -1) health.offline++;
          health.minIsr.set(t.name, Math.min(health.minIsr.get(t.name) ?? p.isr.length, p.isr.length));
        }
      }
      return health;
    },
    async stop() {
      await Promise.all(
        nodes.map(async (n) => {
          if ((await n.pid()) === undefined) return;
          await n.signal('SIGCONT').catch(() => 0);
          await n.signal('SIGKILL').catch(() => 0);
          await n.waitForExit(30_000);
        }),
      );
    },
  };
}

async function topicMetadata(urls: string[], topics: string[]) {
  const admin = new kafkajs.Kafka({
    clientId: 'postbox-stack-cluster',
    brokers: urls,
    logLevel: kafkajs.logLevel.NOTHING,
    connectionTimeout: 1000,
    requestTimeout: 5000,
    retry: { retries: 3, initialRetryTime: 200 },
  }).admin();
  try {
    await admin.connect();
    return (await admin.fetchTopicMetadata({ topics })).topics;
  } finally {
    await admin.disconnect();
  }
}

/** `count` broker/controller port pairs (freePort: below the kernel's ephemeral range, never twice). */
async function freePortPairs(count: number): Promise<Array<{ broker: number; controller: number }>> {
  const pairs: Array<{ broker: number; controller: number }> = [];
  while (pairs.length < count) pairs.push({ broker: await freePort(), controller: await freePort() });
  return pairs;
}
