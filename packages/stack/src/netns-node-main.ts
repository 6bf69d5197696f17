import { clusterNodeService, type ClusterNodeSpec } from './netns-node.ts';

// Run by netnsNodeService inside a node's network namespace: starts the node (its JVM detached, born in this
// namespace) and exits; argv[2] is the node's ClusterNodeSpec as JSON.
const spec = JSON.parse(process.argv[2] ?? '') as ClusterNodeSpec;
await clusterNodeService(spec).start();
