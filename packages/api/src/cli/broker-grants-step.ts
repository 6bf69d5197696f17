import fs from 'node:fs/promises';
import {
  ConfigError,
  DEFAULT_BROKER_USERS,
  DEFAULT_KAFKA_PRINCIPALS,
  kafkaAclCommands,
  kafkaAcls,
  natsPermissions,
  natsPermissionsInclude,
  rabbitPermissionCommands,
  rabbitPermissions,
  type BrokerScope,
  type BrokerUsers,
  type KafkaPrincipals,
  type Sql,
} from '@postbox/engine';
import { listConsumers, outboxByTopic } from '@postbox/engine/control';
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
  // Topics with rows waiting now (a saga's participant registered in another database, say): read off the
  // outbox's partial indexes only. A topic none of these names is not granted; put it in POSTBOX_TOPICS.
  for (const t of await outboxByTopic(sql)) relayTopics.add(t.topic);
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

/** The NATS and RabbitMQ users of the roles: POSTBOX_BROKER_USER_RELAY, _CONSUMER, _API, or postbox-<role>. */
export function brokerUsers(env: NodeJS.ProcessEnv = process.env): BrokerUsers {
  const read = (name: string, fallback: string): string => {
    const value = env[name];
    if (value === undefined || value === '') return fallback;
    if (!/^[A-Za-z0-9_.@-]+$/.test(value))
      throw new ConfigError(`${name} must be a user name (letters, digits, _ . @ -), got "${value}"`);
    return value;
  };
  return {
    relay: read('POSTBOX_BROKER_USER_RELAY', DEFAULT_BROKER_USERS.relay),
    consumer: read('POSTBOX_BROKER_USER_CONSUMER', DEFAULT_BROKER_USERS.consumer),
    api: read('POSTBOX_BROKER_USER_API', DEFAULT_BROKER_USERS.api),
  };
}

/** Who the grants are for, on the configured broker. */
export interface BrokerGrantees {
  kafka: KafkaPrincipals;
  users: BrokerUsers;
}

/**
 * Prints the grants of the configured broker (POSTBOX_BROKER: one deployment publishes to one broker, and the
 * grants are names on it): the Kafka ACLs as `kafka-acls.sh` commands, the NATS permissions as the configuration
 * include, the RabbitMQ permissions as `rabbitmqctl` commands.
 */
export function printBrokerGrants(config: PostboxConfig, scope: BrokerScope, grantees: BrokerGrantees): void {
  const { kafka: principals, users } = grantees;
  const empty = scope.relayTopics.length === 0 && scope.consumers.length === 0;
  const note = '  (none yet: no topics in POSTBOX_TOPICS and no consumer registered or named)';
  switch (config.broker.kind) {
    case 'kafka':
      console.log(`\nKafka ACLs (relay ${principals.relay}, consumer ${principals.consumer}, api ${principals.api}):`);
      if (empty) {
        console.log(note);
        return;
      }
      for (const line of kafkaAclCommands(kafkaAcls(scope), principals)) console.log(`  ${line}`);
      console.log('  (postbox migrate --broker-acls applies them, and removes any other ACL of these principals)');
      return;
    case 'nats':
      console.log(`\nNATS permissions (relay ${users.relay}, consumer ${users.consumer}, api ${users.api}):`);
      if (empty) console.log(note);
      for (const line of natsText(config, scope, users).trimEnd().split('\n')) console.log(`  ${line}`);
      console.log(
        "  (postbox migrate --broker-acls --broker-file FILE writes them as an include of the server's authorization block; then reload the server)",
      );
      return;
    case 'rabbitmq':
      console.log(`\nRabbitMQ permissions (relay ${users.relay}, consumer ${users.consumer}, api ${users.api}):`);
      if (empty) console.log(note);
      for (const line of rabbitCommands(config, scope, users)) console.log(`  ${line}`);
      console.log(
        "  (each replaces the user's permissions on the vhost; postbox migrate --broker-acls --broker-file FILE writes them as a script)",
      );
  }
}

/**
 * Brings the roles' grants on the configured broker to exactly the computed least. Kafka: through the configured
 * connection, whose user must be allowed to alter ACLs. NATS and RabbitMQ take permissions only from their
 * operator (the server's configuration; rabbitmqctl or the management API), so `file` receives what the operator
 * applies: the NATS configuration include (the server reads it again on a reload), or a script of `rabbitmqctl
 * set_permissions` commands to run on a node. The file is replaced whole (a temporary file renamed over it).
 */
export async function applyBrokerGrants(
  config: PostboxConfig,
  scope: BrokerScope,
  grantees: BrokerGrantees,
  file: string | undefined,
): Promise<void> {
  if (config.broker.kind === 'kafka') {
    const acls = kafkaAcls(scope);
    const { created, deleted } = await syncKafkaAcls(config.broker.kafka, acls, grantees.kafka);
    console.log(
      `broker ACLs: ${acls.length} for ${Object.values(grantees.kafka).join(', ')} — ${created} created, ${deleted} removed`,
    );
    return;
  }
  if (file === undefined)
    throw new ConfigError(
      `--broker-acls with POSTBOX_BROKER=${config.broker.kind} needs --broker-file FILE: the broker takes its users' permissions from its operator, not from a client (docs/security.md)`,
    );
  const text =
    config.broker.kind === 'nats'
      ? natsText(config, scope, grantees.users)
      : ['#!/bin/sh', 'set -e', ...rabbitCommands(config, scope, grantees.users), ''].join('\n');
  const before = await fs.readFile(file, 'utf8').catch(() => null);
  const temp = `${file}.${process.pid}.tmp`;
  await fs.writeFile(temp, text, { mode: 0o644 });
  await fs.rename(temp, file);
  const next =
    config.broker.kind === 'nats'
      ? 'reload the server (nats-server --signal reload) to apply it'
      : 'run it on a node of the cluster (sh FILE)';
  console.log(
    `broker permissions: ${Object.values(grantees.users).join(', ')} — ${file} ${before === text ? 'unchanged' : 'written'}; ${next}`,
  );
}

function natsText(config: PostboxConfig, scope: BrokerScope, users: BrokerUsers): string {
  const partitions = new Map(config.topics.map((t) => [t.topic, t.partitions ?? 12]));
  return natsPermissionsInclude(natsPermissions(scope, users, partitions), users);
}

function rabbitCommands(config: PostboxConfig, scope: BrokerScope, users: BrokerUsers): string[] {
  return rabbitPermissionCommands(rabbitPermissions(scope), users, rabbitVhost(config));
}

/** The virtual host RABBITMQ_URL names (its path, URL-encoded), `/` when it names none. */
function rabbitVhost(config: PostboxConfig): string {
  if (config.broker.kind !== 'rabbitmq') return '/';
  const path = new URL(config.broker.rabbitmq.url).pathname.slice(1);
  return path === '' ? '/' : decodeURIComponent(path);
}
