import { fileURLToPath } from 'node:url';
import { createWaker, type Sql } from '@postbox/engine';
import { BullmqRetryScheduler, ReconcileSchedule } from '@postbox/engine/bullmq';
import {
  CHECK_NAMES,
  type CheckName,
  type CheckRunReport,
  isCheckName,
  listFindings,
  Reconciler,
  type RepairProgress,
  type RepairReport,
  type StoredFinding,
} from '@postbox/engine/reconcile';
import type { RetryScheduler } from '@postbox/engine/runtime';
import { developmentStack } from './dev-stack.ts';
import { parseTopics } from '../config/env.ts';
import { linkEnv, requireLink } from '../config/links.ts';
import { parseReconcileGrace, parseSagaModules } from '../config/api.ts';
import { loadReconcileModules, parseReconcileModules } from '../reconcile/modules.ts';
import { loadSagaOrchestrator, registerSagaDefinitions } from '../sagas/modules.ts';
import { shutdownSignal, untilAborted } from './signals.ts';
import {
  integerOption,
  operatorActor,
  operatorCommand,
  operatorUrl,
  type OptionValues,
  printJson,
  UsageError,
  withDatabase,
} from './operator-command.ts';

const HELP = `postbox reconcile — check the pipeline against the business source of truth, repair what does not hold

  postbox reconcile [--check NAME ...] [--execute [--rate N] [--canary N] [--max-error-ratio R]] [--limit N]
                    [--reason TEXT] [--actor NAME] [--json]
      runs each check (all by default), then a repair pass over its open findings: a dry run (what each repair
      would do, nothing changed) unless --execute. Executed repairs start at most --rate a second (default 5),
      the first --canary (default 5) stop the pass on any failure, and past them the pass stops when more than
      --max-error-ratio (default 0.2) failed. Every repaired item is audited with its before and after.
  postbox reconcile schedule [--check NAME ...] [--every MS]
      runs the checks on a schedule (a BullMQ job scheduler per check in REDIS_URL, default every 300000 ms) until
      SIGTERM; any number of processes may run it, one run of a check at a time. Scheduled runs find, never repair.
  postbox reconcile checks [--json]                       the checks, their grace periods, whether they can run
  postbox reconcile findings [--check NAME] [--status S] [--limit N] [--after ID] [--json]
  postbox reconcile ignore ID --reason TEXT                close a finding as accepted (audited)

checks: ${CHECK_NAMES.join(', ')}
statuses: open, manual, repaired, resolved, ignored
Sources of truth come from POSTBOX_RECONCILE_MODULES (modules exporting \`sources\` of defineReconcileSource
results, optionally \`participants\`); saga repairs need the definitions in POSTBOX_SAGA_MODULES; retry jobs are
looked up in REDIS_URL. Grace periods: POSTBOX_RECONCILE_GRACE_MS="check=ms,…".
Actor: --actor, else POSTBOX_ACTOR, else the OS user.
Exit codes: 0 nothing left open, 1 findings remain (or a run failed or stopped), 2 usage error.`;

const OPTIONS = {
  check: { type: 'string', multiple: true },
  execute: { type: 'boolean' },
  rate: { type: 'string' },
  canary: { type: 'string' },
  'max-error-ratio': { type: 'string' },
  limit: { type: 'string' },
  after: { type: 'string' },
  status: { type: 'string' },
  every: { type: 'string' },
  reason: { type: 'string' },
  actor: { type: 'string' },
  json: { type: 'boolean' },
} as const;

type Values = OptionValues<typeof OPTIONS>;

export const reconcileCommand = operatorCommand({
  name: 'reconcile',
  help: HELP,
  options: OPTIONS,
  verb: 'optional',
  usageErrors: 'report',
  async run({ values, verb, rest }) {
    const env = await linkEnv();
    const schedulers = new Map<string, RetryScheduler>();
    return withDatabase({ command: 'reconcile', url: await operatorUrl(env), max: 4 }, async (sql) => {
      try {
        if (verb === 'findings') return await findings(sql, values);
        const reconciler = await buildReconciler(sql, env.REDIS_URL, schedulers);
        if (verb === undefined || verb === 'run') return await reconcile(reconciler, values);
        if (verb === 'checks') return checks(reconciler, values);
        if (verb === 'schedule') return await schedule(reconciler, env.REDIS_URL, values);
        if (verb === 'ignore') return await ignore(reconciler, rest[0], values);
        throw new UsageError(`unknown verb "${verb}"`);
      } finally {
        await Promise.all([...schedulers.values()].map((s) => s.close()));
      }
    });
  },
});

/** The reconciler of this process: registrations from the environment, sagas checked like any process moving them. */
export async function buildReconciler(
  sql: Sql,
  redisUrl: string,
  schedulers: Map<string, RetryScheduler>,
  env: NodeJS.ProcessEnv = process.env,
): Promise<Reconciler> {
  const named = parseReconcileModules(env.POSTBOX_RECONCILE_MODULES ?? '');
  const { sources, participants } = await loadReconcileModules(
    named.length > 0 ? named : await demoReconcileModules(sql, env),
  );
  const sagas = await loadSagaOrchestrator(parseSagaModules(env.POSTBOX_SAGA_MODULES ?? ''));
  if (sagas) await registerSagaDefinitions(sql, sagas);
  return new Reconciler({
    sql,
    sources,
    participants,
    ...(sagas ? { sagas } : {}),
    // Without Redis there is no retry schedule to compare with: the retry-job-missing check says it is unavailable.
    ...(redisUrl
      ? {
          schedulerFor: (consumer: string) => {
            let s = schedulers.get(consumer);
            if (!s) schedulers.set(consumer, (s = new BullmqRetryScheduler({ redisUrl, consumer })));
            return s;
          },
        }
      : {}),
    waker: createWaker(sql),
    options: { graceMs: graceFromEnv(env.POSTBOX_RECONCILE_GRACE_MS ?? '') },
  });
}

async function reconcile(reconciler: Reconciler, v: Values): Promise<number> {
  const names = checkNames(v.check);
  const execute = v.execute === true;
  if (!execute && (v.rate !== undefined || v.canary !== undefined))
    throw new UsageError('--rate and --canary go with --execute (a dry run changes nothing)');
  const actor = operatorActor(v.actor);
  const reason = typeof v.reason === 'string' && v.reason.trim() ? v.reason : 'postbox reconcile';
  const json = v.json === true;
  const out: Array<{ check: CheckRunReport; repair: RepairReport | null }> = [];
  let exit = 0;
  for (const name of names) {
    const check = await reconciler.run(name, { actor });
    let repair: RepairReport | null = null;
    if (check.status === 'finished' && check.counts.found > 0) {
      const bar = json ? null : progressBar(name, execute);
      repair = await reconciler.repair(name, {
        actor,
        reason,
        dryRun: !execute,
        ratePerSecond: number(v.rate, 5, 'rate'),
        stop: {
          canary: integerOption(v.canary, 'canary', { fallback: 5, min: 0 }),
          maxErrorRatio: number(v['max-error-ratio'], 0.2, 'max-error-ratio'),
        },
        limit: integerOption(v.limit, 'limit', { fallback: 1000 }),
        ...(bar ? { onProgress: bar.update } : {}),
      });
      bar?.end();
    }
    const left = check.counts.found - (repair?.counts.repaired ?? 0) - (repair?.counts.stale ?? 0);
    if (check.status !== 'finished' && check.status !== 'skipped') exit = 1;
    if (left > 0 || (repair && repair.status !== 'finished')) exit = 1;
    out.push({ check, repair });
    if (!json) print(check, repair);
  }
  if (json) printJson(out);
  return exit;
}

function print(check: CheckRunReport, repair: RepairReport | null): void {
  const c = check.counts;
  const head = `${check.check.padEnd(19)} run ${check.runId}: ${check.status}`;
  if (check.status !== 'finished') {
    console.log(`${head}${check.error ? ` (${check.error})` : ''}`);
    return;
  }
  console.log(
    `${head}, scanned ${c.scanned}, found ${c.found} (new ${c.opened}, reopened ${c.reopened}), closed ${c.closed}`,
  );
  if (!repair) return;
  for (const i of repair.items)
    console.log(`  #${i.findingId} ${i.key} [${i.kind}] ${i.outcome}${i.action ? `: ${i.action}` : ''} — ${i.detail}`);
  const r = repair.counts;
  const what = repair.dryRun
    ? `dry run ${repair.runId}: would repair ${r.would_repair}, stale ${r.stale}, manual ${r.manual}, failed ${r.failed}; nothing changed (--execute to repair)`
    : `repair ${repair.runId}: repaired ${r.repaired}, stale ${r.stale}, manual ${r.manual}, failed ${r.failed}${repair.stoppedBecause ? `; stopped: ${repair.stoppedBecause}` : ''}${repair.error ? `; ${repair.error}` : ''}`;
  console.log(`  ${what}`);
}

async function schedule(reconciler: Reconciler, redisUrl: string, v: Values): Promise<number> {
  const signal = shutdownSignal();
  const names = checkNames(v.check);
  const every = integerOption(v.every, 'every', { fallback: 300_000, min: 1000 });
  const s = new ReconcileSchedule({
    redisUrl: requireLink({ REDIS_URL: redisUrl }, 'REDIS_URL', 'the Redis that keeps the reconciliation schedule'),
    reconciler,
    checks: names,
    everyMs: every,
    onRun: (r) =>
      console.log(
        `${new Date().toISOString()} ${r.check} run ${r.runId}: ${r.status}, found ${r.counts.found} (new ${r.counts.opened}), closed ${r.counts.closed}${r.error ? ` (${r.error})` : ''}`,
      ),
  });
  await s.start();
  console.log(`reconciliation scheduled: ${names.join(', ')} every ${every} ms (Ctrl-C stops)`);
  await untilAborted(signal);
  await s.close();
  return 0;
}

function checks(reconciler: Reconciler, v: Values): number {
  const rows = reconciler.checks();
  if (v.json) printJson(rows);
  else
    for (const c of rows)
      console.log(
        `${c.name.padEnd(19)} grace ${String(c.graceMs).padStart(8)} ms  ${c.description}${c.unavailable ? `  [cannot run: ${c.unavailable}]` : ''}`,
      );
  return 0;
}

async function findings(sql: Sql, v: Values): Promise<number> {
  const status = typeof v.status === 'string' ? v.status : undefined;
  if (status && !['open', 'manual', 'repaired', 'resolved', 'ignored'].includes(status))
    throw new UsageError(`--status must be open, manual, repaired, resolved or ignored, got "${status}"`);
  const [check] = checkNames(v.check, true);
  const rows = await listFindings(
    sql,
    { ...(check ? { check } : {}), ...(status ? { status: status as StoredFinding['status'] } : {}) },
    integerOption(v.limit, 'limit', { fallback: 50, max: 500 }),
    typeof v.after === 'string' ? integerOption(v.after, 'after') : null,
  );
  if (v.json) printJson(rows);
  else {
    for (const f of rows)
      console.log(
        `#${f.id} ${f.check} ${f.key} [${f.kind}] ${f.status}  expected ${JSON.stringify(f.expected)}  observed ${JSON.stringify(f.observed)}`,
      );
    if (rows.length > 0) console.log(`${rows.length} finding(s); next page: --after ${rows.at(-1)!.id}`);
  }
  return 0;
}

async function ignore(reconciler: Reconciler, id: string | undefined, v: Values): Promise<number> {
  if (!id) throw new UsageError('name the finding: postbox reconcile ignore ID --reason TEXT');
  if (typeof v.reason !== 'string' || !v.reason.trim())
    throw new UsageError('--reason is required (it goes to the audit log)');
  const f = await reconciler.ignore(integerOption(id, 'ID'), {
    actor: operatorActor(v.actor),
    reason: v.reason,
  });
  console.log(`finding #${f.id} (${f.check} ${f.key}) ignored; audited`);
  return 0;
}

/**
 * A progress bar on stderr while a repair pass runs (a terminal: redrawn in place; otherwise a line every tenth).
 */
function progressBar(check: string, execute: boolean): { update: (p: RepairProgress) => void; end: () => void } {
  const tty = process.stderr.isTTY === true;
  let lastDecile = -1;
  let drawn = false;
  const line = (p: RepairProgress) => {
    const width = 24;
    const filled = p.total > 0 ? Math.round((p.done / p.total) * width) : width;
    const c = p.counts;
    const done = execute ? `repaired ${c.repaired}` : `would repair ${c.would_repair}`;
    return `${check} [${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${p.done}/${p.total} ${done} stale ${c.stale} manual ${c.manual} failed ${c.failed}`;
  };
  return {
    update(p) {
      if (tty) {
        process.stderr.write(`\r${line(p)}`);
        drawn = true;
        return;
      }
      const decile = p.total > 0 ? Math.floor((p.done * 10) / p.total) : 10;
      if (decile !== lastDecile) {
        lastDecile = decile;
        process.stderr.write(`${line(p)}\n`);
      }
    },
    end() {
      if (drawn) process.stderr.write('\n');
    },
  };
}

function checkNames(value: Values['check'], optional = false): CheckName[] {
  const list = Array.isArray(value) ? value : typeof value === 'string' ? [value] : [];
  if (list.length === 0) return optional ? [] : [...CHECK_NAMES];
  for (const name of list)
    if (!isCheckName(name)) throw new UsageError(`--check must be one of ${CHECK_NAMES.join(', ')}, got "${name}"`);
  return list as CheckName[];
}

/** The control plane's parser of POSTBOX_RECONCILE_GRACE_MS; a bad value is a usage error here (exit 2). */
function graceFromEnv(value: string): Partial<Record<CheckName, number>> {
  try {
    return parseReconcileGrace(value);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

function number(value: string | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new UsageError(`--${name} must be a number > 0, got "${String(value)}"`);
  return n;
}

/**
 * In a checkout of the repository whose database holds the demo's orders (`npm start` ran), the demo's sources
 * when POSTBOX_RECONCILE_MODULES names none: a new user's first `npx postbox reconcile` checks the demo's business
 * truth instead of skipping both checks. An installed Postbox never guesses.
 */
async function demoReconcileModules(sql: Sql, env: NodeJS.ProcessEnv): Promise<string[]> {
  if (!(await developmentStack())) return [];
  const [row] = await sql<{ demo: boolean }[]>`SELECT to_regclass('demo_order') IS NOT NULL AS demo`;
  if (!row?.demo) return [];
  const topic = parseTopics(env.POSTBOX_TOPICS ?? 'orders.events:12')[0]!.topic;
  console.error(
    `reconcile: the demo's sources (POSTBOX_RECONCILE_MODULES unset; the demo's orders are here, topic ${topic})`,
  );
  return [`${fileURLToPath(new URL('../demo/reconcile.ts', import.meta.url))}?topic=${encodeURIComponent(topic)}`];
}
