import { kafkaService } from './kafka.ts';
import {
  kafkaClusterAnswers,
  kafkaNodePaths,
  quorumVoters,
  stackClusterIdFile,
  stackClusterPorts,
} from './kafka-cluster.ts';
import { StackError } from './errors.ts';
import type { StackPaths } from './paths.ts';
import { formatAddress } from './ports.ts';
import type { LocalService } from './service.ts';

/** The stack's cluster (`up --kafka-brokers 3`): nodes kafka-1..3 on 19192/19193, 19292/19293, 19392/19393. */
export const CLUSTER_SIZE = 3;
export const CLUSTER_URL = Array.from({ length: CLUSTER_SIZE }, (_, i) =>
  formatAddress(stackClusterPorts(i + 1).broker),
).join(',');

/** A node of the stack's cluster: its service, and its node id for the lines `up`, `down` and `status` print. */
export type KafkaNodeService = LocalService & { node: number };

export function clusterServices(paths: StackPaths, brokers: number): KafkaNodeService[] {
  const ports = Array.from({ length: brokers }, (_, i) => stackClusterPorts(i + 1));
  const voters = quorumVoters(ports.map((p) => p.controller));
  const clusterIdFile = stackClusterIdFile(paths);
  return ports.map((p, i) => {
    const node = { id: i + 1, voters, brokers, clusterIdFile };
    const service = kafkaService(kafkaNodePaths(paths, node.id), p, '', undefined, node);
    // Each node's clients are told the whole cluster, and it is ready once the cluster is: all nodes together.
    return {
      ...service,
      url: CLUSTER_URL,
      ready: async () => {
        await service.ready();
        await kafkaClusterAnswers([formatAddress(p.broker)], brokers);
      },
      node: node.id,
    };
  });
}

/** The name `up`, `down` and `status` print: kafka-<i> for a cluster's node. */
export function label(service: LocalService): string {
  const node = (service as Partial<KafkaNodeService>).node;
  return node === undefined ? service.name : `${service.name}-${node}`;
}

/** --kafka-brokers: 1 (the default, one broker) or 3 (a KRaft cluster). */
export function kafkaBrokerCount(value: number | undefined): number {
  if (value === undefined || value === 1 || value === CLUSTER_SIZE) return value ?? 1;
  throw new StackError(
    'bad_config',
    `--kafka-brokers ${value}: the stack runs 1 broker or a cluster of ${CLUSTER_SIZE}`,
  );
}

/** 3 when a node of the stack's cluster runs, else 1. */
export async function runningClusterSize(paths: StackPaths): Promise<number> {
  for (const service of clusterServices(paths, CLUSTER_SIZE))
    if ((await service.ownedPid()) !== undefined) return CLUSTER_SIZE;
  return 1;
}

/** The first node stands for its cluster where one check is enough (an external KAFKA_BROKERS). */
export function onePerCluster(service: LocalService): boolean {
  return ((service as Partial<KafkaNodeService>).node ?? 1) === 1;
}

/** A node of the stack's cluster, not the single broker. */
export function isClusterNode(service: LocalService): boolean {
  return (service as Partial<KafkaNodeService>).node !== undefined;
}
