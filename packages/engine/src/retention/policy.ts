import { ConfigError } from '../errors.ts';
import type { PartitionedTable } from '../queries/partitions.ts';

/**
 * How long Postbox keeps what it writes (seed §4, §8; docs/operations.md "Retention"), in one place. A partition
 * leaves its table once its whole range is older than the table's window and nothing in it is still needed; its
 * rows are archived first (archive.ts), then it is dropped.
 */
export interface RetentionPolicy {
  /**
   * Published outbox rows are kept this long — the audit window: an unknown publish or a reconciliation may still
   * ask for the evidence. @defaultValue 30
   */
  outboxDays: number;
  /**
   * Inbox rows are kept this long: longer than the broker can redeliver (its retention), a backup restore or a
   * manual replay reaches back, or a redelivered event would be applied again; null keeps it forever (a topic
   * that keeps its records forever needs that). Refused when shorter than a consumed topic's retention
   * (broker-retention.ts). @defaultValue 30
   */
  inboxDays: number | null;
  /** Failure payloads are purged after this long (the failure row stays). @defaultValue 30 */
  failurePayloadDays: number;
  /**
   * Ended sagas (completed, compensated, closed manually), their history and ignored replies are kept this long
   * after their last change (retention/sagas.ts); unfinished and frozen sagas are kept. @defaultValue 30
   */
  sagaDays?: number;
  /** Where archives are written: `<dir>/<table>/<partition>.csv.gz` and its `.manifest.json`. */
  archiveDir: string;
}

export const DEFAULT_RETENTION_DAYS = 30;

/** Defaults filled in and values checked: a setting that cannot work is a ConfigError naming its variable. */
export function resolveRetentionPolicy(input: Partial<RetentionPolicy> & { archiveDir: string }): RetentionPolicy {
  const days = (value: number | undefined, variable: string) => {
    const d = value ?? DEFAULT_RETENTION_DAYS;
    if (!Number.isFinite(d) || d <= 0) throw new ConfigError(`${variable} must be a number of days > 0, got ${d}`);
    return d;
  };
  if (input.archiveDir.trim() === '') throw new ConfigError('POSTBOX_ARCHIVE_DIR must name a directory');
  return {
    outboxDays: days(input.outboxDays, 'POSTBOX_OUTBOX_RETENTION_DAYS'),
    inboxDays: input.inboxDays === null ? null : days(input.inboxDays, 'POSTBOX_INBOX_RETENTION_DAYS'),
    failurePayloadDays: days(input.failurePayloadDays, 'POSTBOX_FAILURE_RETENTION_DAYS'),
    sagaDays: days(input.sagaDays, 'POSTBOX_SAGA_RETENTION_DAYS'),
    archiveDir: input.archiveDir,
  };
}

/** A table's window in days under the policy (null: kept forever). */
export function windowDays(policy: RetentionPolicy, table: PartitionedTable): number | null {
  return table === 'message_outbox' ? policy.outboxDays : policy.inboxDays;
}
