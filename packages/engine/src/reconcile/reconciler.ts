import type { Sql } from '../db/connect.ts';
import { ConfigError, NotFoundError } from '../errors.ts';
import type { Waker } from '../outbox/wake.ts';
import type { RetryScheduler } from '../ports/retry-scheduler.ts';
import { insertAudit } from '../queries/audit.ts';
import { lockFinding, setFindingStatus } from '../queries/reconcile-finding.ts';
import type { SagaOrchestrator } from '../saga/orchestrator.ts';
import type { CheckContext, ReconcileCheck } from './check.ts';
import { CHECKS } from './checks/index.ts';
import type { StoredFinding } from '../records/finding.ts';
import type { CheckName } from '../records/finding.ts';
import { isCheckName, type ReconcileOptions, resolveReconcileOptions } from './options.ts';
import { repairFindings, type RepairReport, type RepairRequest } from './repair.ts';
import { type CheckRunReport, type RunBy, runCheck } from './run.ts';
import type { ParticipantRecords, ReconcileSource } from './source.ts';

export interface ReconcilerConfig {
  sql: Sql;
  /** The business sources of truth (defineReconcileSource). @defaultValue none: the outbox and consumer checks skip */
  sources?: readonly ReconcileSource[];
  /** Saga steps whose participants record in this database (defineParticipantRecords). @defaultValue none */
  participants?: readonly ParticipantRecords[];
  /** Saga definitions, for saga repairs (timers, compensation). @defaultValue none: saga findings are manual */
  sagas?: SagaOrchestrator;
  /** A consumer's retry scheduler (its Redis queue), for retry-job-missing. @defaultValue none: that check skips */
  schedulerFor?: (consumer: string) => RetryScheduler;
  /** Nudges relays after a repair wrote outbox rows. @defaultValue none (relays poll) */
  waker?: Waker;
  options?: ReconcileOptions;
  /** @defaultValue Date.now */
  clock?: () => number;
}

/** What a check is, and whether it can run with this reconciler's configuration. */
export interface CheckInfo {
  name: CheckName;
  description: string;
  graceMs: number;
  /** Why it cannot run here, or null. */
  unavailable: string | null;
}

/**
 * Reconciliation (docs/reconciliation.md): named checks of the invariants between the business source of truth,
 * the outbox, consumers, the retry ledger and sagas, and audited repairs through Postbox's own idempotent
 * commands. `run` finds (one run of a check at a time across processes); `repair` acts on the findings, a dry run
 * unless told otherwise. Options are resolved once, here.
 */
export class Reconciler {
  readonly #ctx: CheckContext;
  readonly #sources: readonly ReconcileSource[];

  constructor(config: ReconcilerConfig) {
    const sources = config.sources ?? [];
    const seen = new Set<string>();
    for (const s of sources) {
      if (s.kind !== 'postbox.reconcile-source')
        throw new ConfigError('reconcile sources must be defineReconcileSource(…) results');
      if (seen.has(s.aggregateType))
        throw new ConfigError(`reconcile source ${s.aggregateType} is registered twice: one source per aggregate type`);
      seen.add(s.aggregateType);
    }
    this.#sources = sources;
    const clock = config.clock ?? Date.now;
    this.#ctx = {
      sql: config.sql,
      sources,
      participants: config.participants ?? [],
      schedulerFor: config.schedulerFor ?? null,
      sagas: config.sagas ?? null,
      options: resolveReconcileOptions(config.options),
      now: clock,
      wake: () => config.waker?.wake(),
    };
  }

  /** Every check, with its grace period and whether it can run here. */
  checks(): CheckInfo[] {
    return CHECKS.map((c) => ({
      name: c.name,
      description: c.description,
      graceMs: this.#ctx.options.graceMs[c.name],
      unavailable: c.unavailable(this.#ctx),
    }));
  }

  /** The registered sources of truth. */
  sources(): readonly ReconcileSource[] {
    return this.#sources;
  }

  /** Runs one check (finds, repairs nothing). A run that finds the check's lock held is recorded as skipped. */
  run(check: CheckName, by: RunBy): Promise<CheckRunReport> {
    return runCheck(this.#ctx, checkNamed(check), by);
  }

  /** A repair pass over the check's open findings: a dry run unless `dryRun: false`. */
  repair(check: CheckName, request: RepairRequest): Promise<RepairReport> {
    return repairFindings(this.#ctx, checkNamed(check), request);
  }

  /**
   * An operator decides a finding needs nothing (a known, accepted state): it is closed as ignored and stays so
   * when seen again. Audited. Throws NotFoundError.
   */
  async ignore(findingId: number, by: { actor: string; reason: string }): Promise<StoredFinding> {
    if (!by.reason?.trim()) throw new ConfigError('ignoring a finding needs a reason (it is written to the audit log)');
    return this.#ctx.sql.begin(async (tx) => {
      const f = await lockFinding(tx, findingId);
      if (!f) throw new NotFoundError(`reconciliation finding ${findingId}`);
      const auditId = await insertAudit(tx, {
        actor: by.actor,
        action: 'reconcile.ignore',
        reason: by.reason,
        target: `reconcile:${f.check}:${f.key}`,
        before: { finding: f.id, status: f.status },
        after: { status: 'ignored' },
      });
      const repair = { action: 'ignore', actor: by.actor, auditId, at: new Date().toISOString() };
      await setFindingStatus(tx, f.id, 'ignored', repair);
      return { ...f, status: 'ignored', repair, closedAt: new Date() };
    }) as Promise<StoredFinding>;
  }
}

function checkNamed(name: string): ReconcileCheck {
  if (!isCheckName(name))
    throw new ConfigError(`unknown reconciliation check "${name}" (${CHECKS.map((c) => c.name).join(', ')})`);
  return CHECKS.find((c) => c.name === name)!;
}
