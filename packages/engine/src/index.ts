// @postbox/engine, for services: write events in the business transaction, define consumers, run migrations.
export { connect, type ConnectOptions, type Queryable, type Sql, type Tx } from './db/connect.ts';
export { transaction } from './outbox/transaction.ts';
export { createWaker, type Waker } from './outbox/wake.ts';
export { enqueue, enqueueMany, type EnqueueOptions, type EventInput } from './outbox/enqueue.ts';
export { idempotent, type IdempotentCommand, type IdempotentResult } from './outbox/idempotency.ts';
export { expectRows } from './outbox/expect-rows.ts';
export { newEventId } from './envelope/event-id.ts';
export type { Envelope } from './envelope/envelope.ts';
export {
  defineConsumer,
  defaultConsumerLimits,
  type ConsumerDefinition,
  type ConsumerInput,
  type ConsumerLimits,
  type RetryInput,
  HANDLER_CLIENTS,
  type HandlerClient,
} from './consumer/definition.ts';
export type { BatchHandler, BatchItem, Handler, HandlerContext, HandlerWithBatch } from './records/handler.ts';
export { siblingModule } from './consumer/sibling-module.ts';
export { isSqlExecutor, type SqlExecutor, type SqlParam } from './ports/sql-executor.ts';
export {
  PostboxError,
  EnvelopeValidationError,
  EnvelopeTooLargeError,
  IdempotencyConflictError,
  BusinessConflictError,
  PermanentError,
  ConfigError,
  NotInTransactionError,
  BrokerError,
  NotFoundError,
  ActionRefusedError,
  PayloadKeyError,
  type ErrorKind,
  type EnvelopeIssue,
} from './errors.ts';
export { migrate, pendingMigrations, type MigrateOptions, type MigrationFile } from './migrate/runner.ts';
export { upgradeKind, type UpgradeKind, type UpgradeVerdict } from './migrate/upgrade-kind.ts';
export { applyRoles, readRoleGrants, type RoleTableGrant } from './migrate/roles.ts';
export {
  BROKER_ROLES,
  DEFAULT_KAFKA_PRINCIPALS,
  kafkaAclCommands,
  kafkaAcls,
  type BrokerRole,
  type BrokerScope,
  type KafkaAcl,
  type KafkaPrincipals,
} from './migrate/broker-grants.ts';
export {
  DEFAULT_BROKER_USERS,
  natsInboxPrefix,
  natsPermissions,
  natsPermissionsInclude,
  natsPermissionsVariable,
  rabbitPermissionCommands,
  rabbitPermissions,
  type BrokerUsers,
  type NatsPermissions,
  type RabbitPermissions,
} from './migrate/broker-permissions.ts';
export {
  DATABASE_ROLES,
  POSTBOX_TABLES,
  ROLE_FUNCTIONS,
  ROLE_GRANTS,
  ROLE_PURPOSE,
  ROLE_SEQUENCES,
  type DatabaseRole,
} from './migrate/role-grants.ts';
export {
  formatPayloadKeys,
  generatePayloadKey,
  parsePayloadKeys,
  type PayloadKeyRing,
} from './crypto/payload-keys.ts';
export { createLogger, silentLogger, type Logger, type LoggerOptions } from './telemetry/logger.ts';
export { redactUrl, URL_MASK } from './telemetry/redact-url.ts';
