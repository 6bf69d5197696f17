import type { Sql } from '../db/connect.ts';
import {
  countFailuresToSeal,
  countLedgerToSeal,
  lockFailuresToSeal,
  lockLedgerToSeal,
  storeSealedFailure,
  storeSealedRecord,
} from '../queries/payload-rotation.ts';
import type { PayloadKeyRing } from '../crypto/payload-keys.ts';
import { openFailure, openRecord, sealFailure, sealRecord } from '../crypto/row-seal.ts';

export interface RotationProgress {
  table: 'message_failure' | 'message_retry';
  done: number;
  total: number;
}

export interface RotationOptions {
  /** Rows per transaction. @defaultValue 500 */
  batchSize?: number;
  /** Count only. @defaultValue false */
  dryRun?: boolean;
  onProgress?: (p: RotationProgress) => void;
}

export interface RotationResult {
  primary: string;
  failures: number;
  retries: number;
}

/**
 * Brings every failure and ledger row under the ring's primary key: rows sealed with an older key are opened and
 * sealed again, rows in clear are sealed. Batches of `batchSize` rows, each in its own transaction with its rows
 * locked, so consumers go on meanwhile and a run stopped half-way resumes where it stopped (finished rows no
 * longer match). A row whose key is missing stops the run with that row's error; the batches before it stay.
 */
export async function rotatePayloadKeys(
  sql: Sql,
  ring: PayloadKeyRing,
  options: RotationOptions = {},
): Promise<RotationResult> {
  const batch = options.batchSize ?? 500;
  const report = options.onProgress ?? (() => {});
  const totals = {
    failures: await countFailuresToSeal(sql, ring.primary),
    retries: await countLedgerToSeal(sql, ring.primary),
  };
  if (options.dryRun) return { primary: ring.primary, ...totals };
  const failures = await resealFailures(sql, ring, batch, (done) =>
    report({ table: 'message_failure', done, total: totals.failures }),
  );
  const retries = await resealLedger(sql, ring, batch, (done) =>
    report({ table: 'message_retry', done, total: totals.retries }),
  );
  return { primary: ring.primary, failures, retries };
}

async function resealFailures(sql: Sql, ring: PayloadKeyRing, batch: number, progress: (n: number) => void) {
  let after = 0;
  let done = 0;
  for (;;) {
    const n = await sql.begin(async (tx) => {
      const rows = await lockFailuresToSeal(tx, ring.primary, after, batch);
      for (const row of rows) {
        const sealed = sealFailure(ring, row, openFailure(ring, row));
        await storeSealedFailure(tx, row.failure_id, sealed.keyId, sealed.bytes);
      }
      if (rows.length > 0) after = rows[rows.length - 1]!.failure_id;
      return rows.length;
    });
    if (n === 0) return done;
    progress((done += n));
  }
}

async function resealLedger(sql: Sql, ring: PayloadKeyRing, batch: number, progress: (n: number) => void) {
  let after: { consumer: string; eventId: string } | null = null;
  let done = 0;
  for (;;) {
    const n: number = await sql.begin(async (tx) => {
      const rows = await lockLedgerToSeal(tx, ring.primary, after, batch);
      for (const row of rows) {
        const sealed = sealRecord(ring, row.consumer_name, row.event_id, openRecord(ring, row));
        await storeSealedRecord(tx, row.consumer_name, row.event_id, sealed.keyId, sealed.bytes);
      }
      const last = rows[rows.length - 1];
      if (last) after = { consumer: last.consumer_name, eventId: last.event_id };
      return rows.length;
    });
    if (n === 0) return done;
    progress((done += n));
  }
}
