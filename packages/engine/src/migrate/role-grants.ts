/**
 * The database roles Postbox creates (`postbox migrate --roles`; seed §11, §17) and the narrowest grants
 * each one's commands need. Each is NOLOGIN: a deployment makes its login roles members
 * (`CREATE ROLE relay_svc LOGIN PASSWORD … IN ROLE postbox_relay`) and gives each command its URL
 * (DATABASE_URL_RELAY, …). The tables' owner — whoever runs `postbox migrate` — keeps what needs ownership:
 * migrations, retention (detach, drop), and the demo's own migrations.
 *
 * Letters: S select, I insert, U update, D delete. A column list limits a grant to those columns.
 */
export type DatabaseRole =
  | 'postbox_producer'
  | 'postbox_relay'
  | 'postbox_consumer'
  | 'postbox_api'
  | 'postbox_operator';

export const DATABASE_ROLES: readonly DatabaseRole[] = [
  'postbox_producer',
  'postbox_relay',
  'postbox_consumer',
  'postbox_api',
  'postbox_operator',
];

/** What each role is for, as `--print` says it. */
export const ROLE_PURPOSE: Record<DatabaseRole, string> = {
  postbox_producer: "your service's own role: enqueue, idempotent commands, saga starts in its transactions",
  postbox_relay: '`postbox relay`: the outbox and its leases, nothing else',
  postbox_consumer:
    '`postbox consume`: inbox, versions, parking, retries, failures, saga steps (+ your handler tables)',
  postbox_api: '`postbox api`: reads everything Postbox keeps; writes only what its audited mutations write',
  postbox_operator: 'operator commands (failures, gaps, reconcile, sagas, verify): reads, and their audited repairs',
};

export interface TableGrant {
  table: string;
  privileges: string;
  /** Only these columns (SELECT of a RETURNING, say). */
  columns?: string[];
}

/** Every table Postbox's migrations create (partitions are reached through their parent). */
export const POSTBOX_TABLES = [
  'message_outbox',
  'message_outbox_state',
  'message_outbox_key',
  'relay_lane',
  'relay_instance',
  'relay_lane_inflight',
  'command_idempotency',
  'message_inbox',
  'consumer_aggregate_version',
  'message_parked',
  'consumer_blocked_aggregate',
  'message_failure',
  'message_retry',
  'operator_audit',
  'consumer_registry',
  'consumer_member',
  'consumer_partition_lease',
  'saga_instance',
  'saga_history',
  'saga_reply_ignored',
  'saga_participation',
  'saga_definition',
  'reconciliation_run',
  'reconciliation_finding',
  'retention_run',
  'retention_partition',
] as const;

/** SELECT on every table: what the control plane and the operator read. */
const READ_ALL: TableGrant[] = POSTBOX_TABLES.map((table) => ({ table, privileges: 'S' }));

const ENQUEUE: TableGrant[] = [
  { table: 'message_outbox', privileges: 'I' },
  // enqueue's INSERT … RETURNING lane (the wake-up names the lane).
  { table: 'message_outbox', privileges: 'S', columns: ['lane'] },
];

/** The control plane's audited mutations (replay, skip, republish, retry now, saga actions, reconciliation). */
const CONTROL_WRITES: TableGrant[] = [
  { table: 'message_outbox', privileges: 'IU' },
  { table: 'message_inbox', privileges: 'ID' },
  { table: 'consumer_aggregate_version', privileges: 'IU' },
  { table: 'message_parked', privileges: 'D' },
  { table: 'consumer_blocked_aggregate', privileges: 'D' },
  { table: 'message_failure', privileges: 'U' },
  { table: 'message_retry', privileges: 'IU' },
  { table: 'operator_audit', privileges: 'I' },
  { table: 'saga_instance', privileges: 'U' },
  { table: 'saga_history', privileges: 'I' },
  { table: 'saga_definition', privileges: 'IU' },
  { table: 'reconciliation_run', privileges: 'IU' },
  { table: 'reconciliation_finding', privileges: 'IU' },
];

export const ROLE_GRANTS: Record<DatabaseRole, TableGrant[]> = {
  postbox_producer: [
    ...ENQUEUE,
    { table: 'command_idempotency', privileges: 'SIU' },
    { table: 'saga_instance', privileges: 'SI' },
    { table: 'saga_history', privileges: 'I' },
  ],
  postbox_relay: [
    { table: 'message_outbox', privileges: 'SU' },
    { table: 'message_outbox_state', privileges: 'S' },
    { table: 'relay_lane', privileges: 'SU' },
    { table: 'relay_instance', privileges: 'SIUD' },
    { table: 'relay_lane_inflight', privileges: 'SIUD' },
    { table: 'retention_run', privileges: 'S' },
    { table: 'retention_partition', privileges: 'S' },
  ],
  postbox_consumer: [
    ...ENQUEUE,
    // A saga participant asks whether its reply to a repeated command is written already (saga-participation.ts).
    { table: 'message_outbox_key', privileges: 'S' },
    { table: 'message_inbox', privileges: 'SIUD' },
    { table: 'consumer_aggregate_version', privileges: 'SIU' },
    { table: 'message_parked', privileges: 'SID' },
    { table: 'consumer_blocked_aggregate', privileges: 'SIUD' },
    { table: 'message_failure', privileges: 'SIU' },
    { table: 'message_retry', privileges: 'SIU' },
    { table: 'operator_audit', privileges: 'I' },
    { table: 'operator_audit', privileges: 'S', columns: ['audit_id'] },
    { table: 'consumer_registry', privileges: 'SIU' },
    { table: 'consumer_member', privileges: 'SIUD' },
    { table: 'consumer_partition_lease', privileges: 'SIU' },
    { table: 'saga_instance', privileges: 'SIU' },
    { table: 'saga_history', privileges: 'I' },
    { table: 'saga_reply_ignored', privileges: 'I' },
    { table: 'saga_participation', privileges: 'SIU' },
    { table: 'retention_run', privileges: 'S' },
    { table: 'retention_partition', privileges: 'S' },
  ],
  postbox_api: [...READ_ALL, ...CONTROL_WRITES],
  postbox_operator: [...READ_ALL, ...CONTROL_WRITES],
};

/** Sequences behind bigserial columns: nextval() needs USAGE. */
export const ROLE_SEQUENCES: Partial<Record<DatabaseRole, string[]>> = {
  postbox_consumer: ['message_failure_failure_id_seq', 'operator_audit_audit_id_seq'],
  postbox_api: ['operator_audit_audit_id_seq'],
  postbox_operator: ['operator_audit_audit_id_seq'],
};

/** Functions run with their owner's rights (migration 0020), granted to the roles that call them. */
export const ROLE_FUNCTIONS: Partial<Record<DatabaseRole, string[]>> = {
  // The 3-argument form (0020) is kept for processes of the previous version: it calls the 2-argument one (0024).
  postbox_relay: ['postbox_premake(text, integer)', 'postbox_premake(text, integer, integer)'],
  postbox_consumer: ['postbox_premake(text, integer)', 'postbox_premake(text, integer, integer)'],
};

/** Predefined roles whose membership reaches past the grants matrix (PostgreSQL 14+ names; absent ones ignored). */
export const FORBIDDEN_MEMBERSHIPS = [
  'pg_read_all_data',
  'pg_write_all_data',
  'pg_read_server_files',
  'pg_write_server_files',
  'pg_execute_server_program',
  'pg_signal_backend',
  'pg_create_subscription',
] as const;

export const PRIVILEGE_NAMES: Record<string, string> = { S: 'SELECT', I: 'INSERT', U: 'UPDATE', D: 'DELETE' };
