import {
  ConfigError,
  DEFAULT_KAFKA_PRINCIPALS,
  kafkaAclCommands,
  kafkaAcls,
  type BrokerScope,
  type KafkaPrincipals,
  type Sql,
} from '@postbox/engine';
import { listConsumers } from '@postbox/engine/control';
import { syncKafkaAcls } from '@postbox/engine/kafka';
import type { PostboxConfig } from '../config/env.ts';
import { resolveConsumers } from './consume-command.ts';

/**
 * The broker side of `postbox migrate --roles` (seed §20): what each role may do on the broker, computed from the
 * relay's topics (POSTBOX_TOPICS and every topic a consumer reads) and the consumers — those registered in the
 * database (every one that ever started) and those of the definition modules named on the command line (so the
 * grants can be in place before a consumer's first start).
 */
export async function brokerScope(sql: Sql, config: PostboxConfig, modules: string[]): Promise<BrokerScope> {
  const consumers = new Map<string, { name: string; groupId: string; topics: string[] }>();
  for (const c of await listConsumers(sql))
    consumers.set(c.consumer_name, { name: c.consumer_name, groupId: c.group_id, topics: c.topics });
  for (const d of await resolveConsumers(modules, config))
    consumers.set(d.name, { name: d.name, groupId: d.groupId, topics: [...d.topics] });
  const relayTopics = new Set(config.topics.map((t) => t.topic));
  for (const c of consumers.values()) for (const t of c.topics) relayTopics.add(t);
  return { relayTopics: [...relayTopics].sort(), consumers: [...consumers.values()] };
}

/** The Kafka principals: POSTBOX_KAFKA_PRINCIPAL_RELAY, _CONSUMER, _API (`User:<name>`), or the defaults. */
export function kafkaPrincipals(env: NodeJS.ProcessEnv = process.env): KafkaPrincipals {
  const read = (name: string, fallback: string): string => {
    const value = env[name];
    if (value === undefined || value === '') return fallback;
    if (!/^User:\S+$/.test(value))
      throw new ConfigError(`${name} must be a Kafka principal like User:name, got "${value}"`);
    return value;
  };
  return {
    relay: read('POSTBOX_KAFKA_PRINCIPAL_RELAY', DEFAULT_KAFKA_PRINCIPALS.relay),
    consumer: read('POSTBOX_KAFKA_PRINCIPAL_CONSUMER', DEFAULT_KAFKA_PRINCIPALS.consumer),
    api: read('POSTBOX_KAFKA_PRINCIPAL_API', DEFAULT_KAFKA_PRINCIPALS.api),
  };
}

/** Prints the broker grants as the commands that make them. */
export function printBrokerGrants(scope: BrokerScope, principals: KafkaPrincipals): void {
  console.log(`\nKafka ACLs (relay ${principals.relay}, consumer ${principals.consumer}, api ${principals.api}):`);
  if (scope.relayTopics.length === 0 && scope.consumers.length === 0) {
    console.log('  none: no topics in POSTBOX_TOPICS and no consumer registered or named');
    return;
  }
  for (const line of kafkaAclCommands(kafkaAcls(scope), principals)) console.log(`  ${line}`);
  console.log('  (postbox migrate --broker-acls applies them, and removes any other ACL of these principals)');
}

/** Applies the Kafka ACLs through the configured connection, whose user must be allowed to alter ACLs. */
export async function applyBrokerGrants(
  config: PostboxConfig,
  scope: BrokerScope,
  principals: KafkaPrincipals,
): Promise<void> {
  if (config.broker.kind !== 'kafka')
    throw new ConfigError(
      `--broker-acls applies Kafka ACLs; POSTBOX_BROKER=${config.broker.kind} keeps its users' permissions in the server's configuration (docs/security.md)`,
    );
  const acls = kafkaAcls(scope);
  const { created, deleted } = await syncKafkaAcls(config.broker.kafka, acls, principals);
  console.log(
    `broker ACLs: ${acls.length} for ${Object.values(principals).join(', ')} — ${created} created, ${deleted} removed`,
  );
}
