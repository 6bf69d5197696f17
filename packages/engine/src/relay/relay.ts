import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Sql } from '../db/connect.ts';
import { parseWakePayload, WAKE_CHANNEL } from '../outbox/wake.ts';
import { leaveRelaySet } from '../queries/relay-lanes.ts';
import { releaseLeases } from '../queries/outbox-settle.ts';
import { silentLogger, type Logger } from '../telemetry/logger.ts';
import { observeOutbox, recordRelayCycle } from '../telemetry/metrics.ts';
import type { CycleResult } from './cycle.ts';
import type { LaneExecutor } from './executor.ts';
import { balanceLanes, releaseLane } from './lanes.ts';
import { LaneScheduler } from './lane-scheduler.ts';
import { FailureStreak } from '../telemetry/failure-streak.ts';
import { resolveRelayOptions, type RelayOptions, type RelayOptionsInput } from './options.ts';
import { takeoverFence } from './takeover-fence.ts';

/** What a relay needs: a pool, an executor for its lane cycles, its options. */
export interface RelayConfig {
  sql: Sql;
  executor: LaneExecutor;
  options?: RelayOptionsInput;
  /** @defaultValue `<hostname>-<pid>-<random>` */
  owner?: string;
  log?: Logger;
}

export interface RelayStats {
  owner: string;
  lanes: number[];
  cycles: number;
  published: number;
  rescheduled: number;
  failed: number;
  errors: number;
}

/**
 * The relay loop: its lifecycle and its lane leases; which lane runs when is the LaneScheduler's
 * (lane-scheduler.ts). A small state machine:
 *
 *   created ──start()──▶ running ──stop()──▶ stopping ──▶ stopped
 *
 * start() listens for wake-ups (NOTIFY after a business commit; without LISTEN the poll finds everything, only
 * later), takes its fair share of lanes and renews its leases every third of the lane lease: lanes gained go to
 * the scheduler (held back until the previous owner's batches are over), lanes lost leave it, lanes over the
 * share are given back once their cycle has settled. stop() stops claiming, waits for in-flight cycles to settle,
 * hands back leases of anything claimed and unsettled, and leaves the relay set so other relays take the lanes at
 * once.
 */
export class Relay {
  readonly owner: string;
  readonly #sql: Sql;
  readonly #executor: LaneExecutor;
  readonly #options: RelayOptions;
  readonly #log: Logger;
  /** Failures are logged per streak (start, every 50th, recovery), not per renewal. */
  readonly #renewStreak: FailureStreak;
  readonly #scheduler: LaneScheduler;
  readonly #stats = { cycles: 0, published: 0, rescheduled: 0, failed: 0, errors: 0 };
  #state: 'created' | 'running' | 'stopping' | 'stopped' = 'created';
  #balanceTimer: NodeJS.Timeout | null = null;
  #unlisten: (() => Promise<void>) | null = null;
  #balancing: Promise<void> | null = null;
  #stopped: Promise<void> | null = null;
  #unobserve: (() => void) | null = null;

  constructor(config: RelayConfig) {
    this.#sql = config.sql;
    this.#executor = config.executor;
    this.#options = resolveRelayOptions(config.options);
    this.owner = config.owner ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
    this.#log = (config.log ?? silentLogger).child({ role: 'relay', owner: this.owner });
    this.#renewStreak = new FailureStreak(this.#log, 'relay lane renewal');
    this.#scheduler = new LaneScheduler({
      sql: this.#sql,
      executor: this.#executor,
      owner: this.owner,
      options: this.#options,
      log: this.#log,
      onResult: (result) => this.#record(result),
      onError: () => {
        this.#stats.errors++;
      },
    });
  }

  async start(): Promise<void> {
    if (this.#state !== 'created') throw new Error(`relay ${this.owner} was already started`);
    this.#state = 'running';
    try {
      const listener = await this.#sql.listen(WAKE_CHANNEL, (payload) => this.wake(parseWakePayload(payload)));
      this.#unlisten = () => listener.unlisten();
    } catch (cause) {
      // Without LISTEN the poll still finds everything, only later.
      this.#log.warn({ err: String(cause) }, 'relay could not LISTEN for wake-ups; polling only');
    }
    this.#unobserve = observeOutbox(this, this.#sql);
    await this.#balance();
    this.#balanceTimer = setInterval(() => void this.#balance(), Math.floor(this.#options.laneLeaseMs / 3));
    this.#log.info({ lanes: this.#scheduler.lanes() }, 'relay started');
  }

  /**
   * Makes idle lanes due now (a commit wrote outbox rows): the lanes named, or every lane (null, or nothing
   * named). A busy lane named runs again as soon as its cycle ends, with what accumulated meanwhile.
   */
  wake(lanes: readonly number[] | null = null): void {
    this.#scheduler.wake(lanes);
  }

  stats(): RelayStats {
    return { owner: this.owner, lanes: this.#scheduler.lanes().sort((a, b) => a - b), ...this.#stats };
  }

  stop(): Promise<void> {
    this.#stopped ??= this.#stop();
    return this.#stopped;
  }

  async #stop(): Promise<void> {
    if (this.#state === 'created') {
      this.#state = 'stopped';
      await this.#executor.close();
      return;
    }
    this.#state = 'stopping';
    const settled = this.#scheduler.stop();
    this.#unobserve?.();
    if (this.#balanceTimer) clearInterval(this.#balanceTimer);
    await this.#unlisten?.().catch(() => {});
    await this.#balancing;
    await settled;
    try {
      const released = await releaseLeases(this.#sql, this.owner);
      await leaveRelaySet(this.#sql, this.owner);
      if (released > 0) this.#log.info({ released }, 'relay ended its unsettled batches in flight');
    } catch (cause) {
      // The leases expire by themselves; another relay re-sends those rows.
      this.#log.warn({ err: String(cause) }, 'relay could not hand back its leases; they will expire');
    }
    await this.#executor.close();
    this.#scheduler.clear();
    this.#state = 'stopped';
    this.#log.info({ ...this.#stats }, 'relay stopped');
  }

  #balance(): Promise<void> {
    if (this.#balancing || this.#state !== 'running') return this.#balancing ?? Promise.resolve();
    this.#balancing = this.#rebalance().finally(() => {
      this.#balancing = null;
    });
    return this.#balancing;
  }

  async #rebalance(): Promise<void> {
    try {
      const held = new Set(this.#scheduler.lanes());
      const changes = await balanceLanes(this.#sql, this.owner, this.#options.laneLeaseMs, held);
      for (const lane of changes.lost) this.#scheduler.remove(lane);
      const fences = new Map<number, Date | null>();
      for (const { lane, lastClaimBefore } of changes.gained) {
        const fence = takeoverFence(lastClaimBefore, this.#options.leaseMs);
        fences.set(lane, fence);
        this.#scheduler.add(lane, fence);
      }
      for (const lane of changes.surplus) this.#scheduler.release(lane);
      const gained = changes.gained.map((g) => g.lane);
      if (gained.length || changes.lost.length) {
        this.#log.info({ gained, lost: changes.lost, lanes: [...changes.owned] }, 'relay lanes changed');
      }
      this.#logFences(fences);
      await this.#scheduler.releaseIdle((lane) => releaseLane(this.#sql, this.owner, lane));
      if (this.#renewStreak.count > 0) this.#scheduler.retryFailedNow();
      this.#renewStreak.succeeded();
    } catch (cause) {
      // Unrenewed leases lapse by themselves; the claim's ownership check stops work in lanes no longer ours.
      this.#renewStreak.failed(cause);
    }
    this.#scheduler.schedule();
  }

  /** Says once which lanes just taken over wait out a fence, and until when (the relay's clock). */
  #logFences(fences: Map<number, Date | null>): void {
    const now = Date.now();
    const fenced = [...fences].filter(([, fence]) => (fence?.getTime() ?? 0) > now);
    if (fenced.length === 0) return;
    const until = Math.max(...fenced.map(([, fence]) => fence!.getTime()));
    this.#log.info(
      { lanes: fenced.map(([lane]) => lane), until: new Date(until).toISOString() },
      'lanes taken over after a PostgreSQL restart or crash recovery wait out their takeover fence (ADR 0011)',
    );
  }

  #record(result: CycleResult): void {
    this.#stats.cycles++;
    this.#stats.published += result.published;
    this.#stats.rescheduled += result.rescheduled;
    this.#stats.failed += result.failed;
    recordRelayCycle(result);
    if (result.error) {
      const { code, kind, message, event } = result.error;
      this.#log.warn(
        {
          lanes: result.lanes,
          ...event,
          error_code: code,
          kind,
          err: message,
          rescheduled: result.rescheduled,
          failed: result.failed,
          pauseMs: result.pauseMs,
        },
        'relay publish failed',
      );
    }
    // Each event the relay gave up on: it now needs an operator (replay after fixing the cause).
    for (const event of result.failedEvents ?? [])
      this.#log.error({ lanes: result.lanes, ...event }, 'relay gave up on event: outbox row failed');
  }
}
