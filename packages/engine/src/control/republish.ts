import type { Sql } from '../db/connect.ts';
import { ConfigError, NotFoundError } from '../errors.ts';
import { insertAudit } from '../queries/audit.ts';
import { requeueOutboxVersions } from '../queries/consumer-gaps.ts';

export interface RepublishRequest {
  aggregateId: string;
  fromVersion: number;
  /** @defaultValue every later version */
  toVersion?: number;
  actor: string;
  reason: string;
}

export interface RepublishResult {
  aggregateId: string;
  requeued: number[];
  auditId: number;
}

/**
 * Back-fill: versions of an aggregate go back to pending with the same event ids, so the relay sends them again
 * and every consumer that has them absorbs the duplicate. Rows still in flight are left alone.
 */
export async function republish(sql: Sql, request: RepublishRequest): Promise<RepublishResult> {
  if (!Number.isInteger(request.fromVersion) || request.fromVersion < 1)
    throw new ConfigError(`fromVersion must be an integer ≥ 1, got ${request.fromVersion}`);
  const to = request.toVersion ?? Number.MAX_SAFE_INTEGER;
  if (!Number.isInteger(to) || to < request.fromVersion)
    throw new ConfigError(`toVersion must be an integer ≥ fromVersion (${request.fromVersion}), got ${to}`);
  if (!request.reason.trim()) throw new ConfigError('republish needs a reason (it is written to the audit log)');
  return sql.begin(async (tx) => {
    const requeued = await requeueOutboxVersions(tx, request.aggregateId, request.fromVersion, to);
    if (requeued.length === 0)
      throw new NotFoundError(
        `no published or failed outbox row of ${request.aggregateId} from version ${request.fromVersion}`,
      );
    const auditId = await insertAudit(tx, {
      actor: request.actor,
      action: 'outbox.republish',
      reason: request.reason,
      target: `aggregate:${request.aggregateId}`,
      before: { from_version: request.fromVersion, to_version: request.toVersion ?? null },
      after: { requeued },
    });
    return { aggregateId: request.aggregateId, requeued, auditId };
  });
}
