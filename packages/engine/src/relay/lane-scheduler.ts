import type { Sql } from '../db/connect.ts';
import { laneHasForeignLeases } from '../queries/outbox-claim.ts';
import { resumeLanes } from '../queries/outbox-settle.ts';
import { backoffDelayMs } from '../retry/backoff.ts';
import { FailureStreak } from '../telemetry/failure-streak.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { CycleResult } from './cycle.ts';
import type { LaneExecutor } from './executor.ts';
import type { RelayOptions } from './options.ts';

/** What a scheduler needs: the relay's pool, executor, owner, options and log, and where cycle outcomes go. */
export interface LaneSchedulerConfig {
  sql: Sql;
  executor: LaneExecutor;
  owner: string;
  options: RelayOptions;
  log: Logger;
  /** Each cycle that ran to its end (published, rescheduled or failed rows): the relay's stats, metrics and log. */
  onResult: (result: CycleResult) => void;
  /** Each cycle that threw (the database or the worker failed); the scheduler has logged it and set the backoff. */
  onError: () => void;
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
 * Which of the relay's lanes runs when. Every lane it holds is in one of:
 *
 *   idle ──due──▶ busy ──cycle settled──▶ idle          (due: a wake-up, the poll, a full claim, its pause over)
 *   idle/busy ──over the fair share──▶ releasing ──idle──▶ given back (by the relay)
 *
 * Busy means one cycle in flight: never two per lane, which keeps the lane's order. A lane just taken over is also
 * held back (`takeover`) until the previous owner's leases in it are over — and its takeover fence, for a batch
 * whose lease a server crash lost (ADR 0011) — so nothing overtakes a row that owner may still be sending. A cycle
 * that failed on the database or the worker sets its lanes' backoff; a failed publish pauses the lanes the cycle
 * says, until the broker answers again (waitsForBroker). At most `maxInFlight` cycles run at once, and none after
 * stop().
 */
export class LaneScheduler {
  readonly #sql: Sql;
  readonly #executor: LaneExecutor;
  readonly #owner: string;
  readonly #options: RelayOptions;
  readonly #log: Logger;
  readonly #onResult: (result: CycleResult) => void;
  readonly #onError: () => void;
  /** Failures are logged per streak (start, every 50th, recovery), not per lane and attempt. */
  readonly #cycleStreak: FailureStreak;
  readonly #lanes = new Map<number, LaneState>();
  readonly #inFlight = new Set<Promise<void>>();
  #stopped = false;
  #wakeTimer: NodeJS.Timeout | null = null;
  /** The cycle the due lanes without a backlog share is running (one at a time: see #schedule). */
  #sharedBusy = false;

  constructor(config: LaneSchedulerConfig) {
    this.#sql = config.sql;
    this.#executor = config.executor;
    this.#owner = config.owner;
    this.#options = config.options;
    this.#log = config.log;
    this.#onResult = config.onResult;
    this.#onError = config.onError;
    this.#cycleStreak = new FailureStreak(config.log, 'relay cycle');
  }

  /** The lanes held, in the order they were taken. */
  lanes(): number[] {
    return [...this.#lanes.keys()];
  }

  /** A lane taken over: it runs once the previous owner's leases in it, and `fence`, are over. */
  add(lane: number, fence: Date | null): void {
    this.#lanes.set(lane, {
      busy: false,
      releasing: false,
      takeover: true,
      fence,
      nextAt: 0,
      pausedUntil: 0,
      errors: 0,
      hot: false,
      wokenWhileBusy: false,
      waitsForBroker: false,
      resumedEarly: false,
    });
  }

  /** A lane no longer held (lost, or given back): no cycle starts in it again. */
  remove(lane: number): void {
    this.#lanes.delete(lane);
  }

  /** A lane over the fair share: no new cycle from now on; given back once idle (releaseIdle). */
  release(lane: number): void {
    const state = this.#lanes.get(lane);
    if (state) state.releasing = true;
  }

  /**
   * Gives back, one after the other, every lane being released whose last cycle has settled, and forgets it.
   * A lane whose cycle settles meanwhile goes in the same pass; one whose `giveBack` throws stays, and so do the
   * rest (the next pass tries again).
   */
  async releaseIdle(giveBack: (lane: number) => Promise<void>): Promise<void> {
    for (const [lane, state] of this.#lanes) {
      if (state.releasing && !state.busy) {
        await giveBack(lane);
        this.#lanes.delete(lane);
      }
    }
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
    this.schedule();
  }

  /**
   * The database answers again after an outage: lanes waiting out a backoff their failed cycles earned try now,
   * rather than up to the backoff's cap (minutes) after the database came back.
   */
  retryFailedNow(): void {
    const now = Date.now();
    for (const state of this.#lanes.values()) {
      if (state.errors > 0 && state.pausedUntil <= now) state.nextAt = Math.min(state.nextAt, now);
    }
  }

  /**
   * Starts cycles for the idle lanes that are due, as many at once as maxInFlight allows. A lane with a backlog
   * (its last claim came back full) or just taken over gets a cycle of its own; all other due lanes share one
   * cycle — one claim, one send, one mark for what committed across them — and only one shared cycle runs at a
   * time: what commits while it runs waits for it and goes in the next (group commit). Under a live load that is
   * what keeps batches from shrinking to an event or two per lane and per wake-up; draining a backlog, every
   * lane is hot and they run side by side.
   */
  schedule(): void {
    if (this.#stopped) return;
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
      this.#wakeTimer = setTimeout(() => this.schedule(), Math.max(1, soonest - now));
    }
  }

  /** Starts no cycle from now on (synchronously), then waits until every cycle in flight has settled. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#wakeTimer) clearTimeout(this.#wakeTimer);
    this.#wakeTimer = null;
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight]);
  }

  /** Forgets every lane (after stop(): the relay has handed them back). */
  clear(): void {
    this.#lanes.clear();
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
      this.schedule();
    });
    this.#inFlight.add(run);
  }

  async #cycle(lanes: number[], states: LaneState[]): Promise<void> {
    try {
      // Only a lane alone is ever taken over (schedule): it waits until the previous owner's leases are over.
      if (lanes.length === 1 && states[0]!.takeover) {
        if (await laneHasForeignLeases(this.#sql, lanes[0]!, this.#owner, states[0]!.fence)) {
          states[0]!.nextAt = Date.now() + 1000;
          return;
        }
        states[0]!.takeover = false;
      }
      const result = await this.#executor.run({ lanes, owner: this.#owner });
      this.#onResult(result);
      // The first cycle to succeed after a failure streak shows the path works again: the lanes still waiting out
      // the backoff their failures earned (up to the cap, two minutes) try now. The lane renewal's recovery alone
      // is not enough: cycles may keep failing for a while after it (the worker's pool reconnecting, the broker
      // coming back later), and those lanes would sit out long backoffs while their rows wait.
      if (this.#cycleStreak.count > 0) this.retryFailedNow();
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
      this.#onError();
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
   * Without this they would sit out the backoff the outage earned — up to the 2 min cap for a row retried
   * through a long outage, with every later event of the lane waiting behind it.
   */
  async #resumeLanesWaitingForBroker(): Promise<void> {
    const now = Date.now();
    const waiting = [...this.#lanes].filter(([, s]) => s.waitsForBroker && !s.busy && s.pausedUntil > now);
    if (waiting.length === 0) return;
    const lanes = waiting.map(([lane]) => lane);
    try {
      const rows = await resumeLanes(this.#sql, lanes, this.#owner);
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
}
