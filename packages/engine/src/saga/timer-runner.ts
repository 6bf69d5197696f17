import type { Sql } from '../db/connect.ts';
import { ConfigError } from '../errors.ts';
import { transaction } from '../outbox/transaction.ts';
import { createWaker, type Waker } from '../outbox/wake.ts';
import { dueSagas } from '../queries/saga-instance.ts';
import { claimDueSaga, type LoadedVersions, overdueUnloadedSagas } from '../queries/saga-timer.ts';
import type { BackoffOptions } from '../retry/backoff.ts';
import { FailureStreak } from '../telemetry/failure-streak.ts';
import { failpoint } from '../testing/failpoint.ts';
import { observeSagas } from '../telemetry/metrics.ts';
import { type Logger, silentLogger } from '../telemetry/logger.ts';
import type { SagaOrchestrator } from './orchestrator.ts';
import { freezeSaga, isolateTimerFailure } from './timer-failure.ts';

export interface SagaTimerOptions {
  /** How often due sagas are looked for. @defaultValue 1000 */
  intervalMs?: number;
  /** Sagas handled per look. @defaultValue 100 */
  batch?: number;
  log?: Logger;
  /**
   * Nudges relays after a timer's transaction wrote commands (a compensation, a retry of a step).
   * @defaultValue one on `sql`
   */
  waker?: Waker;
  /**
   * How long a saga of a type this process runs, at a definition version it does not load, may stay overdue
   * before it is frozen as definition_missing: time for a process that loads the version (a rolling deploy's
   * other half) to fire it. @defaultValue 3_600_000 (1 hour)
   */
  definitionMissingGraceMs?: number;
  /** How a timer whose transition failed transiently is pushed back. @defaultValue retry/backoff.ts defaultBackoff */
  backoff?: BackoffOptions;
}

/**
 * Fires sagas' timers: a command's timeout and the saga's deadline, both stored on the saga row (due_at,
 * deadline_at), so no timer is lost with a process or with Redis — the rows are the timers. Each due saga moves
 * in its own transaction through the orchestrator, which fences a timer armed at an older version. Any number of
 * runners may run: each claims a saga with SKIP LOCKED (a saga another runner holds is skipped, not waited for)
 * and re-checks that it is still due, so every timer fires once.
 *
 * Each saga is isolated: one whose transition throws is frozen (permanent: needs_attention, transition_failed) or
 * pushed back with backoff (transient), each in its own transaction, and the look goes on with the next saga.
 * Only sagas of definition versions this process loads are fired; those of a type it runs at a version it does not
 * load are left to a process that does, and frozen as definition_missing once overdue past the grace period.
 *
 *   created ──start()──▶ running (a look every intervalMs, at once again while a look came back full) ──stop()──▶ stopped
 */
export class SagaTimerRunner {
  readonly #sql: Sql;
  readonly #orchestrator: SagaOrchestrator;
  readonly #intervalMs: number;
  readonly #batch: number;
  readonly #streak: FailureStreak;
  readonly #log: Logger;
  readonly #waker: Waker;
  readonly #graceMs: number;
  readonly #backoff: BackoffOptions | undefined;
  readonly #loaded: LoadedVersions;
  #timer: NodeJS.Timeout | null = null;
  #unobserve: (() => void) | null = null;
  #running: Promise<void> | null = null;
  #stopped = false;

  constructor(sql: Sql, orchestrator: SagaOrchestrator, options: SagaTimerOptions = {}) {
    this.#sql = sql;
    this.#orchestrator = orchestrator;
    this.#intervalMs = options.intervalMs ?? 1000;
    this.#waker = options.waker ?? createWaker(sql);
    this.#batch = options.batch ?? 100;
    this.#log = options.log ?? silentLogger;
    this.#streak = new FailureStreak(this.#log, 'saga timer runner');
    this.#graceMs = options.definitionMissingGraceMs ?? 3_600_000;
    if (!Number.isFinite(this.#graceMs) || this.#graceMs < 0)
      throw new ConfigError(`definitionMissingGraceMs must be a number of milliseconds >= 0, got ${this.#graceMs}`);
    this.#backoff = options.backoff;
    const defs = orchestrator.definitions();
    this.#loaded = { types: defs.map((d) => d.type), versions: defs.map((d) => d.version) };
  }

  /** Starts the loop, and the saga gauges (metrics) while it runs. */
  start(): void {
    this.#unobserve = observeSagas(this, this.#sql);
    this.#schedule(0);
  }

  /**
   * Fires every timer due at `now`, then freezes the sagas left overdue past the grace period for want of their
   * definition; returns how many sagas moved (fired or frozen). Also what the loop runs, and what a test or a
   * one-off job calls.
   */
  async fireDue(now = Date.now()): Promise<number> {
    let moved = 0;
    const at = new Date(now);
    for (const due of await dueSagas(this.#sql, at, this.#batch, this.#loaded)) {
      try {
        const outcome = await transaction(this.#sql, this.#waker, async (tx) => {
          const version = await claimDueSaga(tx, due.sagaId, at);
          return version === undefined ? 'skipped' : this.#orchestrator.onTimer(tx, due.sagaId, version, now);
        });
        if (outcome === 'applied') {
          moved++;
          failpoint('saga.timer.after-fire');
        }
      } catch (cause) {
        const isolated = await isolateTimerFailure(this.#sql, due, cause, now, this.#backoff);
        if (isolated.outcome === 'frozen') moved++;
        this.#log.warn({ sagaId: due.sagaId, ...isolated }, 'saga timer transition failed');
      }
    }
    return moved + (await this.#freezeUnloaded(now));
  }

  /** Freezes (definition_missing) sagas of types this process runs whose version nobody fired within the grace. */
  async #freezeUnloaded(now: number): Promise<number> {
    const cutoff = new Date(now - this.#graceMs);
    let frozen = 0;
    for (const s of await overdueUnloadedSagas(this.#sql, cutoff, this.#loaded, this.#batch)) {
      const done = await this.#sql.begin(async (tx) => {
        const version = await claimDueSaga(tx, s.sagaId, cutoff);
        if (version === undefined) return false;
        const cause = `no process loaded its definition version within ${this.#graceMs} ms of its timer`;
        return freezeSaga(tx, s.sagaId, version, 'definition_missing', cause);
      });
      if (done) frozen++;
    }
    return frozen;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#unobserve?.();
    if (this.#timer) clearTimeout(this.#timer);
    await this.#running;
  }

  #schedule(delayMs: number): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#running = this.fireDue().then(
        (moved) => {
          this.#streak.succeeded();
          this.#schedule(moved >= this.#batch ? 0 : this.#intervalMs);
        },
        (cause: unknown) => {
          this.#streak.failed(cause);
          this.#schedule(Math.min(30_000, this.#intervalMs * 2 ** Math.min(this.#streak.count, 5)));
        },
      );
    }, delayMs);
  }
}
