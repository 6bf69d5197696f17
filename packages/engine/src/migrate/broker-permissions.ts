import { BROKER_ROLES, type BrokerRole, type BrokerScope } from './broker-grants.ts';

/**
 * Least privilege on NATS JetStream and RabbitMQ (seed §20), from the same scope as the Kafka ACLs
 * (broker-grants.ts): the relay may write only its topics, a consumer read only its own, the control plane only
 * read their positions. Neither broker lets a client grant permissions (NATS keeps them in the server's
 * configuration, RabbitMQ in its user database, set with rabbitmqctl or the management API), so Postbox computes
 * them here and writes what the server takes: a NATS configuration include, or `rabbitmqctl set_permissions`
 * commands (`postbox migrate --print`, `--broker-acls --broker-file`).
 */

/** The user each role logs in as, on NATS and on RabbitMQ. */
export type BrokerUsers = Record<BrokerRole, string>;

export const DEFAULT_BROKER_USERS: BrokerUsers = {
  relay: 'postbox-relay',
  consumer: 'postbox-consumer',
  api: 'postbox-api',
};

/** Partitions of a topic not in POSTBOX_TOPICS: what every broker's topic setup makes when unsaid. */
export const DEFAULT_PARTITIONS = 12;

/** One role's NATS permissions: the subjects it may publish to and subscribe to (nothing else). */
export interface NatsPermissions {
  publish: string[];
  subscribe: string[];
}

/**
 * The inbox prefix of a client logged in as `user` (adapters/nats/client.ts sets it): replies and pull
 * deliveries come to `<prefix>.…`, and a role may subscribe to its own user's inboxes only — with the shared
 * `_INBOX.>` the relay could subscribe to the deliveries of a consumer's pulls.
 */
export function natsInboxPrefix(user: string): string {
  return `_INBOX_${user.replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

/** JetStream's stream of partition p of a topic (adapters/nats/streams.ts, pinned by the unit test). */
function natsStream(topic: string, partition: number): string {
  return `PB_${topic.replace(/[^A-Za-z0-9_-]/g, '_')}_${partition}`;
}

/**
 * Each role's NATS permissions, every list sorted, without repeats and never empty (an empty allow list would
 * read as no restriction):
 * - relay: publish to its topics' partition subjects `<topic>.<p>`; the JetStream API of their streams that
 *   ensureStreams and the publisher call (account info, stream names, stream info and create);
 * - consumer: no partition subject; the JetStream API of its topics' streams that reading through a group's
 *   durable needs (stream info, consumer list, create, info, delete, next message) and the streams' ack
 *   subjects `$JS.ACK.<stream>.>` (acknowledgement and progress);
 * - api: account info, stream names, and the stream info and consumer list of every topic's streams (lag,
 *   retention), nothing that creates, reads or acknowledges;
 * and each subscribes to its own user's inboxes only. A consumer's durable names carry an epoch
 * (`<group>__<n>`) and subject wildcards match whole tokens only, so a consumer's API subjects are per stream.
 */
export function natsPermissions(
  scope: BrokerScope,
  users: BrokerUsers = DEFAULT_BROKER_USERS,
  partitions: ReadonlyMap<string, number> = new Map(),
): Record<BrokerRole, NatsPermissions> {
  const streams = (topics: Iterable<string>): string[] =>
    [...new Set(topics)].flatMap((t) =>
      Array.from({ length: partitions.get(t) ?? DEFAULT_PARTITIONS }, (_, p) => natsStream(t, p)),
    );
  const base = ['$JS.API.INFO', '$JS.API.STREAM.NAMES'];
  const relay = scope.relayTopics.flatMap((t) =>
    Array.from({ length: partitions.get(t) ?? DEFAULT_PARTITIONS }, (_, p) => `${t}.${p}`),
  );
  const relayStreams = streams(scope.relayTopics);
  const consumerStreams = streams(scope.consumers.flatMap((c) => c.topics));
  const apiStreams = streams([...scope.relayTopics, ...scope.consumers.flatMap((c) => c.topics)]);
  const publish: Record<BrokerRole, string[]> = {
    relay: [
      ...base,
      ...relay,
      ...relayStreams.flatMap((s) => [`$JS.API.STREAM.INFO.${s}`, `$JS.API.STREAM.CREATE.${s}`]),
    ],
    consumer: [
      ...base,
      ...consumerStreams.flatMap((s) => [
        `$JS.API.STREAM.INFO.${s}`,
        `$JS.API.CONSUMER.LIST.${s}`,
        `$JS.API.CONSUMER.CREATE.${s}.*`,
        `$JS.API.CONSUMER.INFO.${s}.*`,
        `$JS.API.CONSUMER.DELETE.${s}.*`,
        `$JS.API.CONSUMER.MSG.NEXT.${s}.*`,
        `$JS.ACK.${s}.>`,
      ]),
    ],
    api: [...base, ...apiStreams.flatMap((s) => [`$JS.API.STREAM.INFO.${s}`, `$JS.API.CONSUMER.LIST.${s}`])],
  };
  const sorted = (list: string[]) => [...new Set(list)].sort();
  return Object.fromEntries(
    BROKER_ROLES.map((role) => [
      role,
      { publish: sorted(publish[role]), subscribe: [`${natsInboxPrefix(users[role])}.>`] },
    ]),
  ) as Record<BrokerRole, NatsPermissions>;
}

/** The configuration variable that holds a role's NATS permissions in the include. */
export function natsPermissionsVariable(role: BrokerRole): string {
  return `POSTBOX_${role.toUpperCase()}_PERMISSIONS`;
}

/**
 * The NATS configuration include that defines each role's permissions as a variable, for the server's
 * `authorization` block: `include "postbox-permissions.conf"` there, and `permissions: $POSTBOX_RELAY_PERMISSIONS`
 * on the relay's user (and so on). The server takes a new one on a reload (`nats-server --signal reload`).
 */
export function natsPermissionsInclude(permissions: Record<BrokerRole, NatsPermissions>, users: BrokerUsers): string {
  const list = (subjects: string[]) => `[${subjects.map((s) => JSON.stringify(s)).join(', ')}]`;
  return [
    "# Postbox broker roles (postbox migrate --broker-acls; docs/security.md). Include it inside the server's",
    "# authorization block and give each role's user its variable as its permissions.",
    ...BROKER_ROLES.flatMap((role) => [
      `# ${role}: user ${users[role]}`,
      `${natsPermissionsVariable(role)} = {`,
      `  publish = { allow = ${list(permissions[role].publish)} }`,
      `  subscribe = { allow = ${list(permissions[role].subscribe)} }`,
      '}',
    ]),
    '',
  ].join('\n');
}

/** One user's permissions on a RabbitMQ virtual host: regexes over exchange and queue names. */
export interface RabbitPermissions {
  configure: string;
  write: string;
  read: string;
}

/** Matches nothing: RabbitMQ's way to give a user access to a vhost and no resource in it. */
const NOTHING = '^$';

/**
 * Each role's RabbitMQ permissions (topology.ts: a direct exchange per topic, a quorum queue per group and
 * partition `<topic>:<group>:<p>`):
 * - relay: configure (declare) and write (publish to) its topics' exchanges; read nothing;
 * - consumer: configure (declare) its groups' queues and write them (a queue.bind writes its queue); read its
 *   groups' queues (consume) and its topics' exchanges (a queue.bind reads its exchange);
 * - api: nothing: queue depths come from passive declares, which RabbitMQ checks against no permission.
 * Neither the relay nor the API can consume any queue, and no consumer can publish to any exchange.
 */
export function rabbitPermissions(scope: BrokerScope): Record<BrokerRole, RabbitPermissions> {
  const exchanges = scope.relayTopics.map(escapeRegex);
  const queues = scope.consumers.flatMap((c) => c.topics.map((t) => `${escapeRegex(`${t}:${c.groupId}:`)}\\d+`));
  const consumerExchanges = scope.consumers.flatMap((c) => c.topics).map(escapeRegex);
  return {
    relay: { configure: anyOf(exchanges), write: anyOf(exchanges), read: NOTHING },
    consumer: { configure: anyOf(queues), write: anyOf(queues), read: anyOf([...queues, ...consumerExchanges]) },
    api: { configure: NOTHING, write: NOTHING, read: NOTHING },
  };
}

/** `^(a|b)$` over the distinct sorted alternatives, or NOTHING when there are none. */
function anyOf(patterns: string[]): string {
  const distinct = [...new Set(patterns)].sort();
  return distinct.length === 0 ? NOTHING : `^(${distinct.join('|')})$`;
}

function escapeRegex(value: string): string {
  return value.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&');
}

/**
 * The commands that set the roles' permissions on `vhost` (each replaces the user's permissions there, so running
 * them again changes nothing), run on a node of the cluster. The users themselves, with their passwords, are the
 * operator's: `rabbitmqctl add_user`.
 */
export function rabbitPermissionCommands(
  permissions: Record<BrokerRole, RabbitPermissions>,
  users: BrokerUsers,
  vhost: string,
): string[] {
  return BROKER_ROLES.map((role) => {
    const p = permissions[role];
    return ['rabbitmqctl', 'set_permissions', '-p', vhost, users[role], p.configure, p.write, p.read]
      .map(shellQuote)
      .join(' ');
  });
}

function shellQuote(value: string): string {
  return /^[\w.:@/-]+$/.test(value) ? value : `'${value.replaceAll("'", "'\\''")}'`;
}
