import { setTimeout as sleep } from 'node:timers/promises';
import type { Sql } from '../db/connect.ts';
import { PostboxError } from '../errors.ts';
import { insertAudit } from '../queries/audit.ts';
import { tryLockJob } from '../queries/job-lock.ts';
import { PARTITIONED_TABLES, sweepDefault, type PartitionedTable } from '../queries/partitions.ts';
import type { TopicRetention } from '../ports/offsets.ts';
import { checkInboxWindow, RetentionRefusedError } from './inbox-window.ts';
import {
  finishRetentionRun,
  insertRetentionRun,
  recordPartition,
  unfinishedPartitions,
} from '../queries/retention-ledger.ts';
import {
  countRows,
  detachPartition,
  dropDetached,
  partitionHolds,
  pruneOutboxKeys,
  tableState,
} from '../queries/retention-partitions.ts';
import { failpoint } from '../testing/failpoint.ts';
import { archivePath, exportPartition, readManifest, verifyArchive, type ArchiveManifest } from './archive.ts';
import { holdReason, planRetention, type TablePlan } from './plan.ts';
import { type RetentionPolicy, windowDays } from './policy.ts';
import { purgeClosedFailurePayloads } from './failure-payloads.ts';
import { purgeEndedSagas, type SagaRetentionResult } from './sagas.ts';

export interface RetentionRunOptions {
  policy: RetentionPolicy;
  trigger: 'schedule' | 'cli';
  actor: string;
  /** Plan only: nothing detached, written or dropped (the run is still recorded). */
  dryRun?: boolean;
  /** The run's clock (simulations and tests: as if it were later). @defaultValue new Date() */
  now?: Date;
  /** Each partition's progress, as it goes. */
  onProgress?: (e: RetentionProgress) => void;
  /** How long the detach waits for its lock on the table before it lets go and tries again. @defaultValue 500 */
  lockTimeoutMs?: number;
  /** Ends the run between two partitions (a process shutting down): the next run goes on from there. */
  signal?: AbortSignal;
  /** Detach attempts before a partition is left for the next run. @defaultValue 10 */
  lockAttempts?: number;
  /**
   * The broker's retention of the consumed topics (BrokerOffsets.retention): a run whose inbox window is shorter
   * is refused. Without it the check is skipped (the CLI and the daily run always give it).
   */
  brokerRetention?: (topics: string[]) => Promise<TopicRetention[]>;
}

export type RetentionStep = 'detached' | 'archived' | 'dropped' | 'held';

export interface RetentionProgress {
  table: PartitionedTable;
  partition: string;
  step: RetentionStep;
  /** Partitions done out of those this run takes out (resumed ones included). */
  done: number;
  total: number;
  rows?: number;
  detail?: string;
}

export interface RetentionPartitionResult {
  table: PartitionedTable;
  partition: string;
  outcome: 'dropped' | 'held';
  rows: number;
  archive: string | null;
  keysPruned: number;
  detail?: string;
}

export interface RetentionReport {
  runId: number;
  status: 'finished' | 'skipped';
  dryRun: boolean;
  plan: TablePlan[];
  partitions: RetentionPartitionResult[];
  /** Partitions made for default-partition rows past their window, before the plan (then taken out with it). */
  defaultSwept: number;
  failurePayloadsPurged: number;
  /** Ended sagas with their history, and ignored replies, past the saga window (retention/sagas.ts). */
  sagasPurged?: SagaRetentionResult;
}

const LOCK_NOT_AVAILABLE = '55P03';

/**
 * One retention run: one at a time across processes (a session advisory lock; a second run is
 * recorded as skipped). First it finishes what a run stopped half-way left (ledger state `detached` → export again;
 * `archived` → drop); then for each candidate of the plan: detach (a short ACCESS EXCLUSIVE on the table under a
 * lock timeout, the holds re-checked under it), export and verify the archive (rows and checksums), drop, and for
 * the outbox prune the (aggregate, version) keys of the range but each aggregate's head. Every step is recorded
 * before the next one starts, each drop audited. Failure payloads past their window are purged last.
 */
export async function runRetention(sql: Sql, o: RetentionRunOptions): Promise<RetentionReport> {
  const now = o.now ?? new Date();
  const dryRun = o.dryRun ?? false;
  const release = await tryLockJob(sql, 'postbox.retention', 'run');
  if (!release) {
    const runId = await insertRetentionRun(sql, {
      trigger: o.trigger,
      actor: o.actor,
      dryRun,
      policy: o.policy,
      status: 'skipped',
    });
    return { runId, status: 'skipped', dryRun, plan: [], partitions: [], defaultSwept: 0, failurePayloadsPurged: 0 };
  }
  const runId = await insertRetentionRun(sql, { trigger: o.trigger, actor: o.actor, dryRun, policy: o.policy });
  try {
    const refusal = await checkInboxWindow(sql, o);
    if (refusal) {
      await finishRetentionRun(sql, runId, 'refused', { refusal }, refusal.reason);
      throw new RetentionRefusedError(refusal);
    }
    const leftOver = dryRun ? [] : await unfinishedPartitions(sql);
    const defaultSwept = dryRun ? 0 : await sweepDefaults(sql, o.policy, now);
    const plan = await planRetention(sql, o.policy, now);
    const report: RetentionReport = {
      runId,
      status: 'finished',
      dryRun,
      plan,
      partitions: [],
      defaultSwept,
      failurePayloadsPurged: 0,
    };
    if (!dryRun) {
      const total = leftOver.length + plan.reduce((a, t) => a + t.candidates.length, 0);
      const progress = (e: Omit<RetentionProgress, 'done' | 'total'>) =>
        o.onProgress?.({ ...e, done: report.partitions.length, total });
      const ctx: StepContext = { sql, o, runId, now, progress };
      const stopped = () => {
        if (o.signal?.aborted)
          throw new PostboxError('retention_stopped', 'transient', 'stopped between two partitions (shutting down)');
      };
      for (const p of leftOver) {
        stopped();
        report.partitions.push(
          await finishPartition(
            ctx,
            p.table_name,
            p.partition,
            p.range_from,
            p.range_to,
            p.state as 'detached' | 'archived',
          ),
        );
      }
      for (const t of plan)
        for (const c of t.candidates) {
          stopped();
          report.partitions.push(await takeOut(ctx, t, c.partition, c.from, c.to));
        }
      report.failurePayloadsPurged = await purgeClosedFailurePayloads(
        sql,
        new Date(now.getTime() - o.policy.failurePayloadDays * 86_400_000),
      );
      report.sagasPurged = await purgeEndedSagas(sql, o.policy, now);
    }
    await finishRetentionRun(sql, runId, 'finished', summary(report));
    return report;
  } catch (cause) {
    if (!(cause instanceof RetentionRefusedError))
      await finishRetentionRun(sql, runId, 'failed', null, (cause as Error).message).catch(() => {});
    throw cause;
  } finally {
    await release();
  }
}

/**
 * Rows of each default partition past the table's window get partitions of their own (queries/partitions.ts
 * sweepDefault), which the plan then takes out like any other. A default busy past the lock timeout waits for the
 * next run.
 */
async function sweepDefaults(sql: Sql, policy: RetentionPolicy, now: Date): Promise<number> {
  let made = 0;
  for (const table of PARTITIONED_TABLES) {
    const days = windowDays(policy, table);
    if (days === null) continue;
    try {
      made += await sweepDefault(sql, table, new Date(now.getTime() - days * 86_400_000));
    } catch (cause) {
      if ((cause as { code?: string }).code !== LOCK_NOT_AVAILABLE) throw cause;
    }
  }
  return made;
}

interface StepContext {
  sql: Sql;
  o: RetentionRunOptions;
  runId: number;
  now: Date;
  progress: (e: Omit<RetentionProgress, 'done' | 'total'>) => void;
}

/** Detach under a short lock (holds re-checked under it), then archive and drop. */
async function takeOut(
  ctx: StepContext,
  plan: TablePlan,
  partition: string,
  from: Date | null,
  to: Date,
): Promise<RetentionPartitionResult> {
  const { sql, o, runId } = ctx;
  const table = plan.table;
  const timeoutMs = Math.max(1, Math.trunc(o.lockTimeoutMs ?? 500));
  const attempts = Math.max(1, o.lockAttempts ?? 10);
  for (let attempt = 1; ; attempt++) {
    try {
      await sql.begin(async (tx) => {
        await tx.unsafe(`SET LOCAL lock_timeout = '${timeoutMs}ms'`);
        await detachPartition(tx, table, partition);
        const reason = holdReason(await partitionHolds(tx, table, partition, plan.cutoff!, true));
        if (reason) throw new Held(reason);
        await recordPartition(tx, {
          table_name: table,
          partition,
          range_from: from,
          range_to: to,
          state: 'detached',
          run_id: runId,
        });
      });
      break;
    } catch (cause) {
      if (cause instanceof Held) {
        ctx.progress({ table, partition, step: 'held', detail: cause.message });
        return { table, partition, outcome: 'held', rows: 0, archive: null, keysPruned: 0, detail: cause.message };
      }
      const waited = (cause as { code?: string }).code === LOCK_NOT_AVAILABLE;
      if (!waited) throw cause;
      if (attempt >= attempts) {
        const detail = `could not lock ${table} in ${attempts} attempts of ${timeoutMs} ms: left for the next run`;
        ctx.progress({ table, partition, step: 'held', detail });
        return { table, partition, outcome: 'held', rows: 0, archive: null, keysPruned: 0, detail };
      }
      await sleep(1000);
    }
  }
  ctx.progress({ table, partition, step: 'detached' });
  failpoint('retention.after-detach');
  return finishPartition(ctx, table, partition, from, to, 'detached');
}

/**
 * From a partition's recorded state to dropped: a detached one is exported and its archive verified; an archived
 * one (a run stopped before the drop) has its archive verified again — a file damaged since sends it back to
 * `detached` (the next run exports it again) and fails this run. Then the drop, the keys of the range but each
 * aggregate's head, the ledger and the audit row, in one transaction.
 */
async function finishPartition(
  ctx: StepContext,
  table: PartitionedTable,
  partition: string,
  from: Date | null,
  to: Date,
  state: 'detached' | 'archived',
): Promise<RetentionPartitionResult> {
  const { sql, o, runId } = ctx;
  const dir = o.policy.archiveDir;
  const entry = { table_name: table, partition, range_from: from, range_to: to, run_id: runId };
  const found = await tableState(sql, partition);
  if (found !== 'detached')
    throw new PostboxError(
      'retention_inconsistent',
      'permanent',
      found === 'missing'
        ? `${partition} is recorded ${state} but no such table exists: restore it from its archive or fix retention_partition by hand`
        : `${partition} is recorded ${state} but is a partition again (attached by hand): detach it, or mark it dropped in retention_partition and leave it`,
    );
  const rows = await countRows(sql, partition);
  let manifest: ArchiveManifest;
  if (state === 'archived') {
    const found = await readManifest(dir, table, partition);
    try {
      if (!found) throw new PostboxError('archive_incomplete', 'permanent', `archive of ${partition}: no manifest`);
      await verifyArchive(dir, found, rows);
    } catch (cause) {
      await recordPartition(sql, { ...entry, state: 'detached' });
      throw cause;
    }
    manifest = found;
  } else {
    manifest = await exportPartition(sql, dir, { table, partition, range: { from, to }, runId });
    await verifyArchive(dir, manifest, rows);
  }
  const path = archivePath(dir, table, partition);
  await recordPartition(sql, {
    ...entry,
    state: 'archived',
    rows,
    bytes: manifest.file.bytes,
    archive_path: path,
    manifest,
  });
  ctx.progress({ table, partition, step: 'archived', rows });
  failpoint('retention.after-archive-before-drop');
  return sql.begin(async (tx) => {
    await dropDetached(tx, partition);
    const keysPruned = table === 'message_outbox' ? await pruneOutboxKeys(tx, from, to) : 0;
    await recordPartition(tx, { ...entry, state: 'dropped' });
    await insertAudit(tx, {
      actor: o.actor,
      action: 'retention.drop',
      reason: `past the ${windowDays(o.policy, table) ?? '∞'}-day window`,
      target: `${table}/${partition}`,
      before: { rows, range: manifest.range },
      after: { archive: path, sha256: manifest.file.sha256, bytes: manifest.file.bytes, keysPruned },
    });
    ctx.progress({ table, partition, step: 'dropped', rows });
    return { table, partition, outcome: 'dropped' as const, rows, archive: path, keysPruned };
  });
}

/** What the ledger keeps of a run: the plan's figures and each partition's outcome (no row data). */
function summary(r: RetentionReport): unknown {
  return {
    tables: r.plan.map((t) => ({
      table: t.table,
      windowDays: t.windowDays,
      cutoff: t.cutoff,
      before: t.before,
      after: t.after,
      candidates: t.candidates.map((c) => c.partition),
      held: t.held.map((h) => ({ partition: h.partition, reason: h.reason })),
      defaultRows: t.defaultRows,
    })),
    partitions: r.partitions,
    defaultSwept: r.defaultSwept,
    failurePayloadsPurged: r.failurePayloadsPurged,
    sagasPurged: r.sagasPurged,
  };
}

/** A partition found held once its lock was taken: the detach is rolled back. */
class Held extends Error {}
