import { parseArgs } from 'node:util';
import {
  applyRoles,
  ConfigError,
  connect,
  DATABASE_ROLES,
  migrate,
  pendingMigrations,
  readRoleGrants,
  ROLE_FUNCTIONS,
  ROLE_PURPOSE,
  ROLE_SEQUENCES,
  upgradeKind,
  type Sql,
} from '@postbox/engine';
import { readConfig } from '../config/env.ts';
import { linkEnv, requireLink } from '../config/links.ts';
import {
  applyBrokerGrants,
  brokerScope,
  brokerUsers,
  kafkaPrincipals,
  printBrokerGrants,
} from './broker-grants-step.ts';

const HELP = `postbox migrate — apply Postbox's forward-only migrations, shipped in @postbox/engine (safe to run from many processes at once)

The demo's tables are not part of it: postbox start (and postbox consume of the demo consumer) apply those.

Uses DATABASE_URL (default: the local stack's PostgreSQL), as the role that owns Postbox's tables.
Options:
  --roles      then create the roles postbox_producer, postbox_relay, postbox_consumer, postbox_api and
               postbox_operator (NOLOGIN) and set each one's grants to exactly the least each needs (idempotent:
               privileges on Postbox's tables are revoked and granted again). Make your login roles members, e.g.
               CREATE ROLE relay_svc LOGIN PASSWORD '…' IN ROLE postbox_relay, and give each command its URL:
               DATABASE_URL_RELAY, DATABASE_URL_CONSUMER, DATABASE_URL_API, DATABASE_URL_OPERATOR
  --print      print the grants matrix (role × table × privilege) as the database enforces it, and the broker's
               side on POSTBOX_BROKER: the Kafka ACLs of the relay, consumer and API principals, the NATS
               permissions or the RabbitMQ permissions of their users (docs/security.md)
  --broker-acls [consumer modules…]
               then bring the Kafka ACLs of those principals (POSTBOX_KAFKA_PRINCIPAL_RELAY, _CONSUMER, _API;
               default User:postbox-relay, User:postbox-consumer, User:postbox-api) to exactly: the relay WRITE and
               DESCRIBE on its topics (POSTBOX_TOPICS and every consumer's) and IDEMPOTENT_WRITE; each consumer
               (registered here, or defined in the modules named) READ on its topics and its group; the API
               DESCRIBE on them. KAFKA_* must name a user allowed to alter ACLs.
               NATS and RabbitMQ take permissions from their operator only: with --broker-file FILE it writes
               them there for the users POSTBOX_BROKER_USER_RELAY, _CONSUMER, _API (default postbox-relay,
               postbox-consumer, postbox-api) — the relay publishes to its topics' partition subjects or
               exchanges only, a consumer reads its groups' durables or queues only, the API reads positions:
               NATS, a configuration include for the server's authorization block (then reload the server);
               RabbitMQ, a script of rabbitmqctl set_permissions commands (run it on a node)
  --broker-file FILE
               where --broker-acls writes the NATS or RabbitMQ permissions
  --check      apply nothing: list the pending migrations, each expand (safe while processes of the previous
               version run) or contract (apply once every process runs the new version), and why.
               Exit 0: nothing pending or expand only; 2: a contract is pending (docs/operations.md, Upgrades)
  -h, --help   this text`;

export async function migrateCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      help: { type: 'boolean', short: 'h' },
      roles: { type: 'boolean' },
      print: { type: 'boolean' },
      check: { type: 'boolean' },
      'broker-acls': { type: 'boolean' },
      'broker-file': { type: 'string' },
    },
    allowPositionals: true,
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const sql = connect({
    url: requireLink(await linkEnv(), 'DATABASE_URL', 'the URL of your PostgreSQL'),
    max: 1,
    applicationName: 'postbox-migrate',
  });
  try {
    if (values.check) return await checkPending(sql);
    await migrate(sql, { log: (line) => console.log(line) });
    if (values.roles) {
      const statements = await applyRoles(sql);
      console.log(`roles: ${DATABASE_ROLES.join(', ')} — ${statements.length} statements, grants as in the matrix`);
    }
    if (values.print && !values['broker-acls'] && !(await brokerConfigured())) {
      // A database-only install prints the database's side; the broker's needs its links.
      await printGrants(sql);
      console.log('\nbroker grants: set the broker links (KAFKA_BROKERS, or POSTBOX_BROKER and its URL) to print them');
    } else if (values.print || values['broker-acls']) {
      const config = readConfig(await linkEnv());
      const scope = await brokerScope(sql, config, positionals);
      const grantees = { kafka: kafkaPrincipals(), users: brokerUsers() };
      if (values['broker-acls']) await applyBrokerGrants(config, scope, grantees, values['broker-file']);
      if (values.print) {
        await printGrants(sql);
        printBrokerGrants(config, scope, grantees);
      }
    }
    return 0;
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** Pending migrations with their upgrade kind; 2 when one is a contract. */
async function checkPending(sql: Sql): Promise<number> {
  const pending = await pendingMigrations(sql);
  if (pending.length === 0) {
    console.log('up to date: nothing pending');
    return 0;
  }
  let contracts = 0;
  for (const f of pending) {
    const v = upgradeKind(f.version, f.text);
    if (v.kind === 'contract') contracts++;
    console.log(`${String(f.version).padStart(4, '0')}_${f.name}  ${v.kind}  ${v.reasons.join('; ')}`);
  }
  console.log(
    contracts === 0
      ? `${pending.length} pending, all expand: safe to apply while processes of the previous version run`
      : `${pending.length} pending, ${contracts} contract: apply after every process runs the new version`,
  );
  return contracts === 0 ? 0 : 2;
}

/** The matrix from the catalog: a row per table, a column per role (S select, s some columns, I, U, D). */
async function printGrants(sql: Sql): Promise<void> {
  const grants = await readRoleGrants(sql);
  const short = DATABASE_ROLES.map((r) => r.replace('postbox_', ''));
  const width = Math.max(...grants.map((g) => g.table.length), 5);
  console.log(`${'table'.padEnd(width)}  ${short.map((r) => r.padEnd(9)).join(' ')}`);
  for (const g of grants)
    console.log(`${g.table.padEnd(width)}  ${DATABASE_ROLES.map((r) => (g.privileges[r] || '-').padEnd(9)).join(' ')}`);
  console.log(
    'S select, s select of some columns, I insert, U update, D delete; partitions are reached through their table',
  );
  for (const role of DATABASE_ROLES) {
    const extra = [
      ...(ROLE_SEQUENCES[role] ?? []).map((s) => `USAGE ${s}`),
      ...(ROLE_FUNCTIONS[role] ?? []).map((f) => `EXECUTE ${f}`),
    ];
    console.log(`${role}: ${ROLE_PURPOSE[role]}${extra.length > 0 ? ` — also ${extra.join(', ')}` : ''}`);
  }
}

/** Whether the environment names a broker (else --print leaves the broker side out instead of failing on it). */
async function brokerConfigured(): Promise<boolean> {
  try {
    readConfig(await linkEnv());
    return true;
  } catch (cause) {
    if (cause instanceof ConfigError) return false;
    throw cause;
  }
}
