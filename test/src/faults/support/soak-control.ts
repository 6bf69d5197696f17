import type { ServiceFaults } from './soak-faults.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { enqueue } from '@postbox/engine';
import { shortPartitions } from '../../support/partitions.ts';
import type { Pipeline } from '../../support/pipeline.ts';
import { spawnPostbox, type RoleProcess } from '../../support/processes.ts';
import type { ControlKind } from './fault-schedule.ts';

/**
 * Checks the final reconciliation may report skipped: saga-step-mismatch needs the participants' step records,
 * which the soak's test participants do not keep. Every other check must finish, so "0 divergences" covers it.
 */
const MAY_SKIP: ReadonlySet<string> = new Set(['saga-step-mismatch']);

/**
 * The control plane during the soak: `postbox reconcile` (every check, a dry run: scheduled runs find, never
 * repair) and `postbox retention run`, started at the seeded times (fault-schedule.ts planControlRuns) beside the
 * faults, not awaited by the timeline. Each run must end by itself within its deadline — done, or failed with a
 * message (PostgreSQL stopped, Redis away) — and a run that hangs, is refused, or dies without a word fails the
 * soak. At most one run of a kind at a time: a start while one runs is skipped and counted.
 *
 * Retention runs under the real windows (30 days), so the soak's own rows, all minutes old, are never taken out.
 * So that each run has partitions to take out, every run first writes a past day's traffic of its own (topic
 * `soak-history`, consumer `soak-history`: nothing the verifier reads), published and taken in long ago, with
 * event ids of that day: the rows fall into the default partition, and the run gives them a partition of their
 * own, archives it and drops it — detach, export, verify and drop under the soak's faults.
 */
export const DEADLINE_MS: Record<ControlKind, number> = { reconcile: 150_000, retention: 180_000 };

const DAY_MS = 86_400_000;
const HISTORY = 'soak-history';
const HISTORY_AGGREGATES = 20;
const HISTORY_VERSIONS = 2;

export interface ControlOptions {
  p: Pipeline;
  /** Environment of both commands, after the pipeline's: the reconcile modules, the archive directory. */
  env: Record<string, string>;
  /** The injector's service faults: a run that fails with none on (or just over) during it is a problem. */
  serviceFaults?: () => ServiceFaults;
}

/** A service back this recently may still be settling (a broker electing leaders): a failure is still its. */
const SETTLE_MS = 30_000;

/** One run's end: its exit code and a line for the log. */
interface RunEnd {
  kind: ControlKind;
  code: number;
  line: string;
}

/** Runs that ended (failed ones included), failed ones, starts skipped, what they found or took out. */
export interface ControlCounts {
  reconcile: { runs: number; failed: number; skipped: number; findings: number };
  retention: { runs: number; failed: number; skipped: number; historyRows: number };
}

export class SoakControl {
  readonly #o: ControlOptions;
  readonly #inFlight = new Map<ControlKind, Promise<void>>();
  readonly #problems: string[] = [];
  #history = 0;
  readonly counts: ControlCounts = {
    reconcile: { runs: 0, failed: 0, skipped: 0, findings: 0 },
    retention: { runs: 0, failed: 0, skipped: 0, historyRows: 0 },
  };

  constructor(o: ControlOptions) {
    this.#o = o;
  }

  /**
   * Day partitions from today on, in place of a fresh database's legacy partition (it covers everything up to two
   * days after the installation, so a past day's ids would fall into it, never to leave): then a past day's ids
   * fall into the default partition. Before any role starts: the partitions are dropped rows and all.
   */
  async setup(): Promise<void> {
    const [r] = await this.#o.p.sql<{ n: number }[]>`
      SELECT ((SELECT count(*) FROM message_outbox) + (SELECT count(*) FROM message_inbox))::int AS n`;
    if (r!.n > 0) throw new Error(`soak control: setup() before any role writes (${r!.n} rows already)`);
    await shortPartitions(this.#o.p.sql, 86_400, 7);
  }

  /** Starts a run of `kind` in the background (skipped while one of that kind runs). */
  start(kind: ControlKind): void {
    if (this.#inFlight.has(kind)) {
      this.counts[kind].skipped++;
      console.log(`# soak control: ${kind} still running, this start skipped`);
      return;
    }
    const faults = this.#o.serviceFaults;
    const before = faults?.();
    const failedBefore = this.counts[kind].failed;
    const run = (kind === 'reconcile' ? this.#reconcile(false) : this.#retention(false))
      .then((end) => {
        console.log(`# soak control: ${end.line}`);
        const after = faults?.();
        if (!before || !after || this.counts[kind].failed === failedBefore) return;
        const underFault =
          before.active > 0 || after.begun > before.begun || Date.now() - before.lastEndedAt < SETTLE_MS;
        if (!underFault)
          this.#problems.push(`${kind} failed with no fault on PostgreSQL, the broker or Redis during it: ${end.line}`);
      })
      .catch((e: Error) => void this.#problems.push(e.message))
      .finally(() => this.#inFlight.delete(kind));
    this.#inFlight.set(kind, run);
  }

  /** Throws what went wrong in a run so far: a hang, a refusal, a death without a message. */
  assertHealthy(): void {
    if (this.#problems.length > 0) throw new Error(`soak control:\n${this.#problems.join('\n')}`);
  }

  /** Waits for the runs in flight, then assertHealthy. */
  async settle(): Promise<void> {
    await Promise.all(this.#inFlight.values());
    this.assertHealthy();
  }

  /**
   * The final runs, once everything is healed and drained: reconcile finds nothing (every check finished or had
   * nothing to run on; the business source's check ran) and a retention run ends cleanly. Returns the divergences.
   */
  async final(): Promise<{ divergences: number; reconcile: string; retention: string }> {
    await this.settle();
    const r = await this.#reconcile(true);
    const t = await this.#retention(true);
    this.assertHealthy();
    return { divergences: r.found, reconcile: r.line, retention: t.line };
  }

  async #reconcile(final: boolean): Promise<RunEnd & { found: number }> {
    const { code, output } = await this.#cli('reconcile', ['reconcile', '--json', '--actor', 'soak-control']);
    const checks = parseChecks(output);
    if (code !== 0 && code !== 1) return this.#fail('reconcile', code, output);
    if (!checks) {
      // Exit 1 without a report: the run failed before it (PostgreSQL away); its message is its last line.
      if (code === 0 || final || !lastLine(output)) return this.#fail('reconcile', code, output);
      this.counts.reconcile.runs++;
      this.counts.reconcile.failed++;
      return { kind: 'reconcile', code, found: 0, line: `reconcile failed: ${lastLine(output)}` };
    }
    const found = checks.reduce((s, c) => s + (c.status === 'finished' ? c.found : 0), 0);
    const failed = checks.filter((c) => c.status !== 'finished' && c.status !== 'skipped');
    const unfinished = checks.filter((c) => c.status !== 'finished' && !MAY_SKIP.has(c.check));
    if (final && (unfinished.length > 0 || !checks.some((c) => c.check === 'outbox-missing')))
      return this.#fail(
        'reconcile',
        code,
        output,
        `the final run: every check finishes but ${[...MAY_SKIP].join(', ')} (${unfinished.map((c) => `${c.check} ${c.status}`).join(', ') || 'outbox-missing absent'})`,
      );
    this.counts.reconcile.runs++;
    if (failed.length > 0) this.counts.reconcile.failed++;
    if (!final) this.counts.reconcile.findings += found;
    const what = checks.map((c) => `${c.check} ${c.status === 'finished' ? c.found : c.status}`).join(', ');
    return { kind: 'reconcile', code, found, line: `reconcile exit ${code}: ${what}` };
  }

  async #retention(final: boolean): Promise<RunEnd> {
    const planted = await this.#plantHistory(final).catch((e: Error) => `history not written (${e.message})`);
    const { code, output } = await this.#cli('retention', ['retention', 'run', '--actor', 'soak-control']);
    const summary = output.split('\n').find((l) => /^run \S+: \d+ partitions archived and dropped/.test(l));
    if (code === 3) {
      this.counts.retention.skipped++;
      return { kind: 'retention', code, line: `retention skipped (another run holds the lock); ${planted}` };
    }
    if (code === 0) {
      this.counts.retention.runs++;
      return { kind: 'retention', code, line: `retention ${summary ?? 'done'}; ${planted}` };
    }
    // Exit 2 is a refusal: one because the broker could not say its retention (stopped, killed) is a fault's
    // doing and counted as a failed run; any other (a window that does not fit) is a setup error.
    const brokerAway = code === 2 && /cannot read the broker's retention/.test(output);
    if ((code !== 1 && !brokerAway) || final || !lastLine(output)) return this.#fail('retention', code, output);
    this.counts.retention.runs++;
    this.counts.retention.failed++;
    return { kind: 'retention', code, line: `retention failed: ${lastLine(output)}; ${planted}` };
  }

  /** Runs the command until it ends or its deadline passes (then it is killed: a hang is a finding). */
  async #cli(kind: ControlKind, args: string[]): Promise<{ code: number; output: string }> {
    const run: RoleProcess = spawnPostbox(args, this.#o.p.env(this.#o.env));
    const code = await Promise.race([
      run.exited,
      sleep(DEADLINE_MS[kind], undefined, { ref: false }).then(() => 'hung' as const),
    ]);
    if (code === null) throw new Error(`${kind} was killed by a signal:\n${run.output().slice(-3000)}`);
    if (code !== 'hung') return { code, output: run.output() };
    run.kill('SIGKILL');
    await run.exited;
    throw new Error(`${kind} still ran after ${DEADLINE_MS[kind]} ms:\n${run.output().slice(-3000)}`);
  }

  #fail(kind: ControlKind, code: number, output: string, why = 'an unclean end'): never {
    throw new Error(`${kind} exited ${code} (${why}):\n${output.slice(-3000)}`);
  }

  /**
   * A past day's traffic (day 40 + n before today, a day of its own per run): outbox rows published then and
   * inbox rows taken in then, written and published in one transaction (no relay ever sees them pending).
   */
  async #plantHistory(final: boolean): Promise<string> {
    const sql = this.#o.p.sql;
    const n = this.#history++;
    const day = Math.floor(Date.now() / DAY_MS) * DAY_MS - (40 + n) * DAY_MS;
    const ids: string[] = [];
    await sql.begin(async (tx) => {
      for (let v = 1; v <= HISTORY_VERSIONS; v++)
        for (let a = 0; a < HISTORY_AGGREGATES; a++) {
          const id = idAt(day + 3_600_000 + ids.length, ids.length);
          ids.push(id);
          await enqueue(
            tx,
            { event_id: id, event_type: 'HistoryEvent', aggregate_id: `h${n}-${a}`, aggregate_version: v, data: {} },
            { topic: HISTORY, producer: 'soak-history' },
          );
        }
      const at = new Date(day + 7_200_000);
      await tx`UPDATE message_outbox SET status = 'published', published_at = ${at} WHERE event_id = ANY(${ids}::uuid[])`;
      await tx`
        INSERT INTO message_inbox (consumer_name, event_id, aggregate_id, aggregate_version, processed_at)
        SELECT ${HISTORY}, event_id, aggregate_id, aggregate_version, ${at} FROM message_outbox
        WHERE event_id = ANY(${ids}::uuid[])`;
    });
    this.counts.retention.historyRows += ids.length;
    return `${ids.length} rows of ${new Date(day).toISOString().slice(0, 10)} written before it${final ? ' (final)' : ''}`;
  }

  /** Partitions the retention runs archived and dropped (the retention ledger). */
  async droppedPartitions(): Promise<number> {
    const [r] = await this.#o.p.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM retention_partition WHERE state = 'dropped'`;
    return r!.n;
  }

  /** Rows of the planted history still in the outbox or the inbox (0 once every run took its day out). */
  async historyLeft(): Promise<number> {
    const sql = this.#o.p.sql;
    const [r] = await sql<{ n: number }[]>`
      SELECT ((SELECT count(*) FROM message_outbox WHERE topic = ${HISTORY})
            + (SELECT count(*) FROM message_inbox WHERE consumer_name = ${HISTORY}))::int AS n`;
    return r!.n;
  }
}

interface CheckLine {
  check: string;
  status: string;
  found: number;
}

/** The checks of `postbox reconcile --json`'s report, or null when it printed none. */
function parseChecks(output: string): CheckLine[] | null {
  const start = output.search(/^\[$/m);
  if (start < 0) return null;
  const end = output.lastIndexOf('\n]');
  try {
    const report = JSON.parse(output.slice(start, end + 2)) as Array<{
      check: { check: string; status: string; counts: { found: number } };
    }>;
    return report.map((r) => ({ check: r.check.check, status: r.check.status, found: r.check.counts.found }));
  } catch {
    return null;
  }
}

function lastLine(output: string): string {
  return (
    output
      .trim()
      .split('\n')
      .filter((l) => l.trim())
      .at(-1) ?? ''
  );
}

/** A v7 id of millisecond `ms`, distinct per n (as retention.run.test.ts makes them). */
function idAt(ms: number, n: number): string {
  const hex = `${ms.toString(16).padStart(12, '0')}7${(n & 0xfff).toString(16).padStart(3, '0')}8${n.toString(16).padStart(15, '0')}`;
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
