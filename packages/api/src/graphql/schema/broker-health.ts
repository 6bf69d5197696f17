import type { BrokerHealthReport, BrokerNodeHealth, TopicReplicaHealth } from '@postbox/engine/control';
import { builder } from '../builder.ts';

const BrokerNodeRef = builder.objectRef<BrokerNodeHealth>('BrokerNode').implement({
  description:
    'A node the cluster lists, or one holding replicas it no longer lists (fenced), and whether it answered a ' +
    'connection of its own',
  fields: (t) => ({
    id: t.exposeInt('id'),
    address: t.exposeString('address', {
      description: 'host:port as the cluster advertises it; empty for a node it no longer lists',
    }),
    reachable: t.exposeBoolean('reachable'),
    error: t.exposeString('error', { nullable: true, description: 'Why it did not answer' }),
  }),
});

const TopicReplicaHealthRef = builder.objectRef<TopicReplicaHealth>('TopicReplicaHealth').implement({
  description: "A topic's partitions, counted; a replica on a node that does not answer is not counted in sync",
  fields: (t) => ({
    topic: t.exposeString('topic'),
    partitions: t.exposeInt('partitions'),
    replicationFactor: t.exposeInt('replicationFactor'),
    minInsyncReplicas: t.exposeInt('minInsyncReplicas', {
      nullable: true,
      description: "The topic's effective min.insync.replicas (null: the broker did not say)",
    }),
    underReplicated: t.exposeInt('underReplicated', {
      description: 'Partitions with fewer in-sync replicas than replicas: one more loss and they may stall',
    }),
    offline: t.exposeInt('offline', {
      description: 'Partitions without a leader that answers: events for them stay pending, nothing is lost',
    }),
    belowMinInsync: t.exposeInt('belowMinInsync', {
      description: 'Partitions with fewer in-sync replicas than min.insync.replicas: publishing to them stalls',
    }),
    minIsr: t.exposeInt('minIsr', { description: 'The smallest in-sync replica count among the partitions' }),
    error: t.exposeString('error', { nullable: true, description: 'Why the topic could not be read' }),
  }),
});

const BrokerHealthRef = builder.objectRef<BrokerHealthReport>('BrokerHealth').implement({
  description: "The broker's copies of Postbox's topics, as the control plane's last probe saw them",
  fields: (t) => ({
    at: t.field({ type: 'DateTime', resolve: (r) => r.at }),
    ok: t.exposeBoolean('ok', { description: 'The probe got an answer (false: no broker answered in time)' }),
    error: t.exposeString('error', { nullable: true }),
    brokers: t.field({ type: [BrokerNodeRef], resolve: (r) => r.brokers }),
    topics: t.field({ type: [TopicReplicaHealthRef], resolve: (r) => r.topics }),
  }),
});

builder.queryField('brokerHealth', (t) =>
  t.field({
    type: BrokerHealthRef,
    nullable: true,
    description:
      'Replica health of the topics Postbox publishes to and consumes from (under-replicated, offline, ISR ' +
      'below min.insync.replicas) and which nodes answer; a report up to 5 s old; null on a broker without ' +
      'replicas to read (NATS, RabbitMQ)',
    authScopes: { viewer: true },
    resolve: (_root, _args, ctx) => ctx.deps.brokerHealth.current(),
  }),
);
