import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Sql } from '../db/connect.ts';
import { parseWakePayload, WAKE_CHANNEL } from '../outbox/wake.ts';
import { laneHasForeignLeases } from '../queries/outbox-claim.ts';
import { leaveRelaySet } from '../queries/relay-lanes.ts';
import { releaseLeases, resumeLanes } from '../queries/outbox-settle.ts';
import { backoffDelayMs } from '../retry/backoff.ts';
import { silentLogger, type Logger } from '../telemetry/logger.ts';
import { observeOutbox, recordRelayCycle } from '../telemetry/metrics.ts';
import type { CycleResult } from './cycle.ts';
import type { LaneExecutor } from './executor.ts';
import { balanceLanes, releaseLane } from './lanes.ts';
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

interface LaneState {
  busy: boolean;
  releasing: boolean;
  /** A newly taken lane waits until the previous owner's leases in it are over. */
  takeover: boolean;
  /**
   * With `takeover`: until when a batch of the previous owner may still be on its way although no lease in the
   * database says so any more — its claim's record lost in a server crash (ADR 0010, ADR 0011). Null: none.
   */
  fence: Date | null;
  nextAt: number;
  pausedUntil: number;
  errors: number;
  /** Its last claim came back full: it has a backlog, and gets a cycle of its own (see #schedule). */
  hot: boolean;
  /**
   * A wake-up named it while its cycle ran: that cycle's claim may have run before the commit it announces, so
   * the lane runs again as soon as the cycle ends instead of a poll later.
   */
  wokenWhileBusy: boolean;
  /**
   * Paused by a failed publish: resumed as soon as another cycle gets a confirmation (the broker answers again),
   * not when the backoff ends — up to the 2 min cap for rows retried through a long outage, with the rest of the
   * lane waiting behind its head. At most once between two passing cycles of its own, so a lane whose own
   * partition stays down keeps its backoff and its attempts grow no faster.
   */
  waitsForBroker: boolean;
  resumedEarly: boolean;
}

/**
 * The relay loop, a small state machine:
 *
 *   created ──start()──▶ running ──stop()──▶ stopping ──▶ stopped
 *
 * While running, every lane this relay leases is in one of: idle (waiting for a wake-up, the poll or its pause
 * to end), busy (one cycle in flight: never two per lane, which keeps the lane's order), or releasing (over the
 * fair share: no new cycle, given back once idle); a lane just taken over is also held back (`takeover`) until
 * the previous owner's leases in it are over — and its takeover fence, for a batch whose lease a server crash lost
 * (ADR 0011) — so nothing overtakes a row that owner may still be sending. A
 * cycle that came back full runs again at once; wake-ups (NOTIFY after a business commit) and the poll make idle
 * lanes due. stop() stops claiming, waits for in-flight cycles to settle, hands back leases of anything claimed
 * and unsettled, and leaves the relay set so other relays take the lanes at once.
 */
export class Relay {
  readonly owner: string;
  readonly #sql: Sql;
  readonly #executor: LaneExecutor;
  readonly #options: RelayOptions;
  readonly #log: Logger;
  /** Failures are logged per streak (start, every 50th, recovery), not per lane and attempt. */
  readonly #cycleStreak: FailureStreak;
  readonly #renewStreak: FailureStreak;
  readonly #lanes = new Map<number, LaneState>();
  readonly #inFlight = new Set<Promise<void>>();
  readonly #stats = { cycles: 0, published: 0, rescheduled: 0, failed: 0, errors: 0 };
  #state: 'created' | 'running' | 'stopping' | 'stopped' = 'created';
  #balanceTimer: NodeJS.Timeout | null = null;
  #wakeTimer: NodeJS.Timeout | null = null;
  /** The cycle the due lanes without a backlog share is running (one at a time: see #schedule). */
  #sharedBusy = false;
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
    this.#cycleStreak = new FailureStreak(this.#log, 'relay cycle');
    this.#renewStreak = new FailureStreak(this.#log, 'relay lane renewal');
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
    this.#log.info({ lanes: [...this.#lanes.keys()] }, 'relay started');
  }

  /**
   * Makes idle lanes due now (a commit wrote outbox rows): the lanes named, or every lane (null, or nothing
   * named). A busy lane named runs again as soon as its cycle ends, with what accumulated meanwhile.
   */
  wake(lanes: readonly number[] | null = null): void {
    const now = Date.now();
    const due = (lane: LaneState) => {
      if (lane.busy) lane.wokenWhileBusy = true;
      if (lane.pausedUntil <= now) lane.nextAt = Math.min(lane.nextAt, now);
    };
    if (lanes === null || lanes.length === 0) for (const lane of this.#lanes.values()) due(lane);
    else
      for (const l of lanes) {
        const lane = this.#lanes.get(l);
        if (lane) due(lane);
      }
    this.#schedule();
  }

  stats(): RelayStats {
    return { owner: this.owner, lanes: [...this.#lanes.keys()].sort((a, b) => a - b), ...this.#stats };
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
    this.#unobserve?.();
    if (this.#balanceTimer) clearInterval(this.#balanceTimer);
    if (this.#wakeTimer) clearTimeout(this.#wakeTimer);
    await this.#unlisten?.().catch(() => {});
    await this.#balancing;
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight]);
    try {
      const released = await releaseLeases(this.#sql, this.owner);
      await leaveRelaySet(this.#sql, this.owner);
      if (released > 0) this.#log.info({ released }, 'relay ended its unsettled batches in flight');
    } catch (cause) {
      // The leases expire by themselves; another relay re-sends those rows.
      this.#log.warn({ err: String(cause) }, 'relay could not hand back its leases; they will expire');
    }
    await this.#executor.close();
    this.#lanes.clear();
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
      const changes = await balanceLanes(this.#sql, this.owner, this.#options.laneLeaseMs, new Set(this.#lanes.keys()));
      for (const lane of changes.lost) this.#lanes.delete(lane);
      for (const { lane, lastClaimBefore } of changes.gained) {
        this.#lanes.set(lane, {
          busy: false,
          releasing: false,
          takeover: true,
          fence: takeoverFence(lastClaimBefore, this.#options.leaseMs),
          nextAt: 0,
          pausedUntil: 0,
          errors: 0,
          hot: false,
          wokenWhileBusy: false,
          waitsForBroker: false,
          resumedEarly: false,
        });
      }
      for (const lane of changes.surplus) {
        const state = this.#lanes.get(lane);
        if (state) state.releasing = true;
      }
      const gained = changes.gained.map((g) => g.lane);
      if (gained.length || changes.lost.length) {
        this.#log.info({ gained, lost: changes.lost, lanes: [...changes.owned] }, 'relay lanes changed');
      }
      this.#logFences(gained);
      await this.#releaseIdleSurplus();
      if (this.#renewStreak.count > 0) this.#retryFailedLanesNow();
      this.#renewStreak.succeeded();
    } catch (cause) {
      // Unrenewed leases lapse by themselves; the claim's ownership check stops work in lanes no longer ours.
      this.#renewStreak.failed(cause);
    }
    this.#schedule();
  }

  /** Says once which lanes just taken over wait out a fence, and until when (the relay's clock). */
  #logFences(gained: number[]): void {
    const now = Date.now();
    const fenced = gained.filter((lane) => (this.#lanes.get(lane)?.fence?.getTime() ?? 0) > now);
    if (fenced.length === 0) return;
    const until = Math.max(...fenced.map((lane) => this.#lanes.get(lane)!.fence!.getTime()));
    this.#log.info(
      { lanes: fenced, until: new Date(until).toISOString() },
      'lanes taken over after a PostgreSQL restart or crash recovery wait out their takeover fence (ADR 0011)',
    );
  }

  /**
   * The database answers again after an outage: lanes waiting out a backoff their failed cycles earned try now,
   * rather than up to the backoff's cap (minutes) after the database came back.
   */
  #retryFailedLanesNow(): void {
    const now = Date.now();
    for (const state of this.#lanes.values()) {
      if (state.errors > 0 && state.pausedUntil <= now) state.nextAt = Math.min(state.nextAt, now);
    }
  }

  async #releaseIdleSurplus(): Promise<void> {
    for (const [lane, state] of this.#lanes) {
      if (state.releasing && !state.busy) {
        await releaseLane(this.#sql, this.owner, lane);
        this.#lanes.delete(lane);
      }
    }
  }

  /**
   * Starts cycles for the idle lanes that are due, as many at once as maxInFlight allows. A lane with a backlog
   * (its last claim came back full) or just taken over gets a cycle of its own; all other due lanes share one
   * cycle — one claim, one send, one mark for what committed across them — and only one shared cycle runs at a
   * time: what commits while it runs waits for it and goes in the next (group commit). Under a live load that is
   * what keeps batches from shrinking to an event or two per lane and per wake-up; draining a backlog, every
   * lane is hot and they run side by side as before.
   */
  #schedule(): void {
    if (this.#state !== 'running') return;
    const now = Date.now();
    let soonest = Infinity;
    const solo: number[] = [];
    const shared: number[] = [];
    for (const [lane, state] of this.#lanes) {
      if (state.busy || state.releasing) continue;
      if (state.nextAt > now) {
        soonest = Math.min(soonest, state.nextAt);
        continue;
      }
      (state.hot || state.takeover ? solo : shared).push(lane);
    }
    const groups = [...solo.map((lane) => [lane]), ...(shared.length > 0 && !this.#sharedBusy ? [shared] : [])];
    for (const lanes of groups) {
      if (this.#inFlight.size >= this.#options.maxInFlight) break;
      this.#startCycle(lanes, lanes === shared);
    }
    if (this.#wakeTimer) clearTimeout(this.#wakeTimer);
    this.#wakeTimer = null;
    if (soonest !== Infinity) {
      this.#wakeTimer = setTimeout(() => this.#schedule(), Math.max(1, soonest - now));
    }
  }

  #startCycle(lanes: number[], shared: boolean): void {
    const states = lanes.map((lane) => this.#lanes.get(lane)!);
    for (const state of states) {
      state.busy = true;
      state.wokenWhileBusy = false;
    }
    if (shared) this.#sharedBusy = true;
    const run = this.#cycle(lanes, states).finally(() => {
      for (const state of states) state.busy = false;
      if (shared) this.#sharedBusy = false;
      this.#inFlight.delete(run);
      this.#schedule();
    });
    this.#inFlight.add(run);
  }

  async #cycle(lanes: number[], states: LaneState[]): Promise<void> {
    try {
      // Only a lane alone is ever taken over (#schedule): it waits until the previous owner's leases are over.
      if (lanes.length === 1 && states[0]!.takeover) {
        if (await laneHasForeignLeases(this.#sql, lanes[0]!, this.owner, states[0]!.fence)) {
          states[0]!.nextAt = Date.now() + 1000;
          return;
        }
        states[0]!.takeover = false;
      }
      const result = await this.#executor.run({ lanes, owner: this.owner });
      this.#record(result);
      // The first cycle to succeed after a failure streak shows the path works again: the lanes still waiting out
      // the backoff their failures earned (up to the cap, two minutes) try now. The lane renewal's recovery alone
      // was not enough: cycles kept failing for a while after it (the worker's pool reconnecting, the broker coming
      // back later), and those lanes sat out long backoffs while their rows waited (the outage fault test).
      if (this.#cycleStreak.count > 0) this.#retryFailedLanesNow();
      this.#cycleStreak.succeeded();
      if (result.published > 0) await this.#resumeLanesWaitingForBroker();
      const now = Date.now();
      const full = result.full;
      const paused = new Set(result.pausedLanes);
      lanes.forEach((lane, i) => {
        const state = states[i]!;
        state.errors = 0;
        state.hot = full && (result.claimedByLane[lane] ?? 0) > 0;
        if (result.pauseMs !== null && paused.has(lane)) {
          state.pausedUntil = now + result.pauseMs;
          state.nextAt = state.pausedUntil;
          state.waitsForBroker = !state.resumedEarly;
        } else {
          state.waitsForBroker = false;
          state.resumedEarly = false;
          // A full claim may have left rows in any of its lanes (the limit is shared): all go again at once; so
          // does a lane woken while the cycle ran. Otherwise the next wake-up or the poll brings it back.
          state.nextAt = full || state.wokenWhileBusy ? now : now + this.#options.pollMs;
        }
      });
    } catch (cause) {
      // The database or the worker failed: the rows stay leased and are re-sent after the lease if need be.
      this.#stats.errors++;
      let delay = 0;
      for (const state of states) {
        state.errors++;
        delay = Math.max(100, backoffDelayMs(state.errors, this.#options.backoff));
        state.nextAt = Date.now() + delay;
      }
      this.#cycleStreak.failed(cause, { lanes, retryInMs: delay });
    }
  }

  /**
   * The broker answers again: lanes paused by failed publishes go now, their rows made due (one statement).
   * Without this they sat out the backoff the outage earned — up to the 2 min cap for a row retried through a
   * long outage, with every later event of the lane waiting behind it (fault suite: broker SIGKILL, twice).
   */
  async #resumeLanesWaitingForBroker(): Promise<void> {
    const now = Date.now();
    const waiting = [...this.#lanes].filter(([, s]) => s.waitsForBroker && !s.busy && s.pausedUntil > now);
    if (waiting.length === 0) return;
    const lanes = waiting.map(([lane]) => lane);
    try {
      const rows = await resumeLanes(this.#sql, lanes, this.owner);
      for (const [, state] of waiting) {
        state.waitsForBroker = false;
        state.resumedEarly = true;
        state.pausedUntil = 0;
        state.nextAt = Math.min(state.nextAt, Date.now());
      }
      this.#log.info({ lanes, rows }, 'broker answers again: lanes paused by failed publishes resume now');
    } catch (cause) {
      // They wait out their backoff instead.
      this.#log.warn({ lanes, err: String(cause) }, 'could not resume the lanes paused by the broker outage');
    }
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
