import type { Sql } from '../db/connect.ts';
import { transaction } from '../outbox/transaction.ts';
import { createWaker, type Waker } from '../outbox/wake.ts';
import { dueSagas } from '../queries/saga-instance.ts';
import { FailureStreak } from '../telemetry/failure-streak.ts';
import { failpoint } from '../testing/failpoint.ts';
import { observeSagas } from '../telemetry/metrics.ts';
import { type Logger, silentLogger } from '../telemetry/logger.ts';
import type { SagaOrchestrator } from './orchestrator.ts';

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
}

/**
 * Fires sagas' timers: a command's timeout and the saga's deadline, both stored on the saga row (due_at,
 * deadline_at), so no timer is lost with a process or with Redis — the rows are the timers. Each due saga moves
 * in its own transaction through the orchestrator, which fences a timer armed at an older version; any number
 * of runners may run (the row lock serialises them, the version check makes the second one a no-op).
 *
 *   created ──start()──▶ running (a look every intervalMs, at once again while a look came back full) ──stop()──▶ stopped
 */
export class SagaTimerRunner {
  readonly #sql: Sql;
  readonly #orchestrator: SagaOrchestrator;
  readonly #intervalMs: number;
  readonly #batch: number;
  readonly #streak: FailureStreak;
  readonly #waker: Waker;
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
    this.#streak = new FailureStreak(options.log ?? silentLogger, 'saga timer runner');
  }

  /** Starts the loop, and the saga gauges (metrics) while it runs. */
  start(): void {
    this.#unobserve = observeSagas(this, this.#sql);
    this.#schedule(0);
  }

  /**
   * Fires every timer due at `now`; returns how many sagas moved. Also what the loop runs, and what a test or a
   * one-off job calls.
   */
  async fireDue(now = Date.now()): Promise<number> {
    let moved = 0;
    for (const { sagaId, version } of await dueSagas(this.#sql, new Date(now), this.#batch)) {
      const outcome = await transaction(this.#sql, this.#waker, (tx) =>
        this.#orchestrator.onTimer(tx, sagaId, version, now),
      );
      if (outcome === 'applied') {
        moved++;
        failpoint('saga.timer.after-fire');
      }
    }
    return moved;
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
