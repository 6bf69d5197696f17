/**
 * Least privilege on the broker (seed §20): the relay may write only its topics, a consumer read only its own, the
 * control plane only describe them for lag — the broker side of the database roles in role-grants.ts. Computed from
 * the scope Postbox knows (the relay's topics, and each registered consumer's group and topics), so `postbox
 * migrate --roles --print` shows it and `--broker-acls` applies it (adapters/kafka/acls.ts).
 */

/** The broker-side roles: one principal each, as the database roles are one per command. */
export type BrokerRole = 'relay' | 'consumer' | 'api';

export const BROKER_ROLES: readonly BrokerRole[] = ['relay', 'consumer', 'api'];

/** What the grants are computed from. */
export interface BrokerScope {
  /** Every topic the relay publishes to. */
  relayTopics: readonly string[];
  /** Every consumer: its group and the topics it reads. */
  consumers: ReadonlyArray<{ name: string; groupId: string; topics: readonly string[] }>;
}

/** The Kafka principals of the roles (SASL user names as `User:<name>`), overridable per deployment. */
export type KafkaPrincipals = Record<BrokerRole, string>;

export const DEFAULT_KAFKA_PRINCIPALS: KafkaPrincipals = {
  relay: 'User:postbox-relay',
  consumer: 'User:postbox-consumer',
  api: 'User:postbox-api',
};

export type KafkaResourceType = 'topic' | 'group' | 'cluster';
export type KafkaOperation = 'WRITE' | 'READ' | 'DESCRIBE' | 'IDEMPOTENT_WRITE';

/** One ALLOW entry, literal resource name, any host. */
export interface KafkaAcl {
  role: BrokerRole;
  resourceType: KafkaResourceType;
  /** The topic or group; `kafka-cluster` for the cluster. */
  name: string;
  operation: KafkaOperation;
}

/**
 * The Kafka ACLs of each role, sorted and without repeats:
 * - relay: WRITE and DESCRIBE on each of its topics, IDEMPOTENT_WRITE on the cluster (its producer is idempotent);
 * - consumer: READ and DESCRIBE on each consumer's topics, READ on each consumer's group (joins and offset commits);
 * - api: DESCRIBE on the consumers' topics and groups (end offsets and committed offsets: lag), nothing else.
 */
export function kafkaAcls(scope: BrokerScope): KafkaAcl[] {
  const acls: KafkaAcl[] = [];
  const add = (role: BrokerRole, resourceType: KafkaResourceType, name: string, ...ops: KafkaOperation[]) => {
    for (const operation of ops) acls.push({ role, resourceType, name, operation });
  };
  for (const topic of scope.relayTopics) add('relay', 'topic', topic, 'WRITE', 'DESCRIBE');
  if (scope.relayTopics.length > 0) add('relay', 'cluster', 'kafka-cluster', 'IDEMPOTENT_WRITE');
  for (const c of scope.consumers) {
    for (const topic of c.topics) {
      add('consumer', 'topic', topic, 'READ', 'DESCRIBE');
      add('api', 'topic', topic, 'DESCRIBE');
    }
    add('consumer', 'group', c.groupId, 'READ');
    add('api', 'group', c.groupId, 'DESCRIBE');
  }
  const seen = new Set<string>();
  return acls
    .filter((a) => {
      const key = aclKey(a);
      return seen.has(key) ? false : (seen.add(key), true);
    })
    .sort((a, b) => aclKey(a).localeCompare(aclKey(b)));
}

/** A stable identity of an ACL: role, resource and operation. */
export function aclKey(a: KafkaAcl): string {
  return `${a.role} ${a.resourceType}:${a.name} ${a.operation}`;
}

/** The `kafka-acls.sh` command that adds `acls` for `principals` (what `--print` shows an operator). */
export function kafkaAclCommands(acls: readonly KafkaAcl[], principals: KafkaPrincipals): string[] {
  const option: Record<KafkaResourceType, (name: string) => string> = {
    topic: (name) => `--topic ${shellQuote(name)}`,
    group: (name) => `--group ${shellQuote(name)}`,
    cluster: () => '--cluster',
  };
  return acls.map(
    (a) =>
      `kafka-acls.sh --bootstrap-server "$KAFKA_BROKERS" --add --allow-principal ${shellQuote(principals[a.role])} ` +
      `--operation ${a.operation} ${option[a.resourceType](a.name)}`,
  );
}

function shellQuote(value: string): string {
  return /^[\w.:@/-]+$/.test(value) ? value : `'${value.replaceAll("'", "'\\''")}'`;
}
