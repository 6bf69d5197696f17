import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { formatReport, totals, type VerifyReport } from '@postbox/engine/verify';
import type { Pipeline } from '../../support/pipeline.ts';
import { checkTimes, type ControlKind, type FaultKind, type PlannedFault, type PlannedRun } from './fault-schedule.ts';
import type { SoakFaults } from './soak-faults.ts';

/** How long the final drain may take: open failures replayed, everything delivered and settled. */
const DRAIN_MS = 300_000;

/** Stuck work in a verifier report: expired leases, overdue pending rows, overdue retries, parked gaps. */
export const stuckOf = (r: VerifyReport): number =>
  r.log.stuck.expiredLeases.count +
  r.log.stuck.overduePending.count +
  r.consumers.reduce((s, c) => s + c.stuck.overdueRetries.count + c.stuck.parkedGaps.count, 0);

export interface Timeline {
  faults: PlannedFault[];
  runs: PlannedRun[];
  minutes: number;
  inject: SoakFaults;
  /** A five-minute check. */
  check: (atMin: number) => Promise<void>;
  /** Starts a control-plane run; it goes on beside the timeline. */
  control: (kind: ControlKind) => void;
  /** Throws a finding seen between steps: a role dead by itself, a control run hung. */
  watch: (when: string) => void;
}

/**
 * Runs the plan's begins, ends, checks and control runs in their order (an end before a begin at the same time,
 * so a subject is free again; a check before the faults after it), each awaited — a control run only started. A
 * slow step (a broker restart) shifts every later step by its delay, so durations and gaps stay the plan's and
 * the same faults overlap. Between steps `watch` looks for findings. Returns the faults injected, by kind.
 */
export async function runTimeline(t: Timeline): Promise<Partial<Record<FaultKind, number>>> {
  type Step = { at: number; order: number; what: string; run: () => Promise<void> };
  const steps: Step[] = [
    ...t.faults.flatMap((f): Step[] => [
      { at: f.atMs + f.durationMs, order: 0, what: `end ${f.kind} ${f.target}`, run: () => t.inject.end(f) },
      {
        at: f.atMs,
        order: 2,
        what: `begin ${f.kind} ${f.target} for ${f.durationMs / 1000} s`,
        run: () => t.inject.begin(f),
      },
    ]),
    ...checkTimes(t.minutes).map((at) => ({
      at,
      order: 1,
      what: `check at ${at / 60_000} min`,
      run: () => t.check(at / 60_000),
    })),
    ...t.runs.map((r) => ({ at: r.atMs, order: 3, what: `start a ${r.kind} run`, run: async () => t.control(r.kind) })),
    { at: t.minutes * 60_000, order: 4, what: 'the end of the schedule', run: async () => {} },
  ].sort((a, b) => a.at - b.at || a.order - b.order);
  const injected: Partial<Record<FaultKind, number>> = {};
  const t0 = Date.now();
  let lag = 0;
  for (const step of steps) {
    while (Date.now() - t0 < step.at + lag) {
      t.watch(`before "${step.what}"`);
      await sleep(Math.min(2000, step.at + lag - (Date.now() - t0)));
    }
    const started = Date.now();
    try {
      await step.run();
    } catch (cause) {
      throw new Error(
        `soak step "${step.what}" at +${((started - t0) / 1000).toFixed(1)} s failed: ${(cause as Error).message}`,
        { cause },
      );
    }
    const took = Date.now() - started;
    lag = Math.max(lag, Date.now() - t0 - step.at);
    console.log(
      `# soak +${((started - t0) / 1000).toFixed(1)} s (plan +${(step.at / 1000).toFixed(1)} s) ${step.what}${took > 1000 ? ` (${(took / 1000).toFixed(1)} s)` : ''}`,
    );
  }
  for (const f of t.faults) injected[f.kind] = (injected[f.kind] ?? 0) + 1;
  return injected;
}

/** A five-minute check: not final (work in flight is fine), but nothing lost, applied twice or reordered. */
export async function checkMidRun(p: Pipeline): Promise<void> {
  const report = await p.verify({ final: false, stuckAfterMs: 120_000 });
  const t = totals(report);
  console.log(
    `# soak check: ${t.events} events, ${t.lost} lost, ${t.appliedTwice} applied twice, ${t.reordered} reordered, ${stuckOf(report)} stuck (tolerated mid-run)`,
  );
  assert.equal(t.lost + t.appliedTwice + t.reordered, 0, formatReport(report));
}

/**
 * Everything written is delivered and settled: open failures replayed (the downstream is fixed), then a final
 * verification that holds, within DRAIN_MS. A violation that waiting cannot mend fails at once.
 */
export async function drain(p: Pipeline, inject: SoakFaults): Promise<VerifyReport> {
  const deadline = Date.now() + DRAIN_MS;
  for (;;) {
    await inject.replayOpen();
    try {
      return await p.settle(Math.min(60_000, Math.max(1, deadline - Date.now())), { stuckAfterMs: 60_000 });
    } catch (cause) {
      if ((cause as Error).message.includes('the verifier found violations') || Date.now() > deadline) throw cause;
    }
  }
}
