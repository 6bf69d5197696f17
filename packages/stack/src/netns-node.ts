import { fileURLToPath } from 'node:url';
import { kafkaService } from './kafka.ts';
import { kafkaNodePaths, type KafkaClusterNode } from './kafka-cluster.ts';
import { stackPaths } from './paths.ts';
import type { HostPort } from './ports.ts';
import { withSharedJars } from './private.ts';
import { run } from './process.ts';
import type { LocalService } from './service.ts';

/**
 * Everything that makes one node of a private cluster, as plain data: the test process builds the node's service
 * from it, and so does a process started inside the node's network namespace (netns-node-main.ts).
 */
export interface ClusterNodeSpec {
  home: string;
  node: KafkaClusterNode;
  broker: HostPort;
  controller: HostPort;
  /** Extra server.properties lines. */
  properties: string;
}

/** The node's service: the stack's Kafka settings (kafka.ts) with the node's own paths under `home`. */
export function clusterNodeService(spec: ClusterNodeSpec): LocalService {
  const paths = kafkaNodePaths(withSharedJars(stackPaths(spec.home)), spec.node.id);
  return kafkaService(
    paths,
    { broker: spec.broker, controller: spec.controller },
    spec.properties,
    undefined,
    spec.node,
  );
}

const MAIN = fileURLToPath(new URL('./netns-node-main.ts', import.meta.url));

/**
 * The node's service, started inside the network namespace `netns` (`ip netns exec`, root only): a process cannot
 * move another into a namespace, but whatever it spawns is born in its own, so the start (write the properties,
 * format, spawn the detached JVM, write the pid file) runs in a short-lived Node process there, and the JVM it
 * leaves behind listens on the namespace's address. Everything else (ready, stop, pid) works from outside.
 */
export function netnsNodeService(spec: ClusterNodeSpec, netns: string): LocalService {
  const service = clusterNodeService(spec);
  const conditions = process.execArgv.filter((a) => a.startsWith('--conditions'));
  return {
    ...service,
    start: async () => {
      await run('ip', ['netns', 'exec', netns, process.execPath, ...conditions, MAIN, JSON.stringify(spec)], {
        timeoutMs: 120_000,
      });
    },
  };
}
