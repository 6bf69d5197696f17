import type { Sql } from '../db/connect.ts';
import { ConfigError } from '../errors.ts';
import { deleteEndedSagas, deleteIgnoredReplies } from '../queries/saga-retention.ts';
import { DEFAULT_RETENTION_DAYS, type RetentionPolicy } from './policy.ts';

export interface SagaRetentionResult {
  /** Ended sagas deleted, with their history. */
  sagas: number;
  /** Ignored replies deleted. */
  ignoredReplies: number;
}

/**
 * Ended sagas, their history and the ignored replies leave after the policy's saga window (`sagaDays`, like the
 * outbox's audit window: 30 days by default), in batches of their own transaction each (no long lock, a run
 * stopped half-way loses nothing). Sagas still unfinished or frozen for an operator are kept, however old. Run by
 * the retention run (run.ts) after the partitions.
 */
export async function purgeEndedSagas(
  sql: Sql,
  policy: Pick<RetentionPolicy, 'sagaDays'>,
  now: Date,
  batch = 1000,
): Promise<SagaRetentionResult> {
  const days = policy.sagaDays ?? DEFAULT_RETENTION_DAYS;
  if (!Number.isFinite(days) || days <= 0)
    throw new ConfigError(`POSTBOX_SAGA_RETENTION_DAYS must be a number of days > 0, got ${days}`);
  const cutoff = new Date(now.getTime() - days * 86_400_000);
  const result: SagaRetentionResult = { sagas: 0, ignoredReplies: 0 };
  for (;;) {
    const n = await deleteEndedSagas(sql, cutoff, batch);
    result.sagas += n;
    if (n < batch) break;
  }
  for (;;) {
    const n = await deleteIgnoredReplies(sql, cutoff, batch);
    result.ignoredReplies += n;
    if (n < batch) break;
  }
  return result;
}
