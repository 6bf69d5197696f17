// `npm run test:faults -- [--iterations N] [--minutes M] [--kill-loop-ms MS] [--only PATTERN] [--broker B]`: the fault suite
// (test/src/faults) against the local stack, with N iterations per failpoint and repeated fault (CI: 20), run
// again and again until M minutes have passed (a soak; default one round). Each scenario appends its verifier
// totals to a summary file; the last line here sums them: scenarios, iterations, events, lost, applied twice,
// reordered, duplicates absorbed. Exit code non-zero when a test failed or any total that must be 0 is not.
// `--mix [--minutes M] [--seed N]` runs the soak instead (faults.mix.test.ts: M minutes of mixed faults on a
// seeded schedule, default 30) and prints its summary line; `--seed` replays the schedule of a printed seed.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { formatSeed, parseSeed } from '../test/src/faults/support/fault-schedule.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
/** The scenario files that take their broker from POSTBOX_FAULT_BROKER (test/src/support/fault-broker.ts). */
const BROKER_FILES = ['faults.kill-loop.test.ts', 'faults.broker.test.ts'];
const BROKERS = ['kafka', 'nats', 'rabbitmq'];
const testDir = path.join(root, 'test');
const MIX_FILE = 'src/faults/faults.mix.test.ts';
const HELP = `usage: npm run test:faults -- [--iterations N] [--minutes M] [--kill-loop-ms MS] [--only PATTERN] [--broker B]
       npm run test:faults -- --mix [--minutes M] [--seed N]
  --iterations N     kills per failpoint, drops per proxy fault (default 20; stops and outages scale with N/10)
  --minutes M        repeat the suite until M minutes have passed (a soak); default: one round. With --mix:
                     the soak's length (default 30)
  --kill-loop-ms MS  length of the random kill loop (default 60000)
  --only PATTERN     only the scenario files whose name contains PATTERN (e.g. kill-loop)
  --broker B         kafka, nats, rabbitmq or several (comma-separated; default kafka): the whole suite runs on
                     Kafka; on NATS and RabbitMQ the scenarios that kill processes and the broker run again
                     (${BROKER_FILES.join(', ')}), each ending with the verifier
  --mix              the soak alone (${MIX_FILE}): M minutes (default 30) of kills, stops, partitions,
                     broker, PostgreSQL and Redis faults, rebalances and replays on a seeded schedule, under
                     steady load and sagas, with reconciliation and retention runs every 2-3 minutes; the
                     verifier every 5 minutes and at the end. Prints the seed first
  --seed N           the soak's schedule from this seed (decimal or 0x hex, < 2^64), as a soak printed it`;

function integer(value: string | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) {
    console.error(`test:faults: --${name} must be an integer ≥ 1, got "${value}"\n${HELP}`);
    process.exit(2);
  }
  return n;
}

const { values } = parseArgs({
  options: {
    iterations: { type: 'string' },
    minutes: { type: 'string' },
    'kill-loop-ms': { type: 'string' },
    only: { type: 'string' },
    broker: { type: 'string' },
    mix: { type: 'boolean' },
    seed: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const iterations = integer(values.iterations, 'iterations', 20);
const mix = values.mix === true;
const minutes = values.minutes === undefined ? (mix ? 30 : 0) : integer(values.minutes, 'minutes', 1);
let seed: string | undefined;
if (values.seed !== undefined) {
  if (!mix) {
    console.error(`test:faults: --seed needs --mix\n${HELP}`);
    process.exit(2);
  }
  try {
    seed = formatSeed(parseSeed(values.seed));
  } catch (cause) {
    console.error(`test:faults: --seed: ${(cause as Error).message}\n${HELP}`);
    process.exit(2);
  }
}
if (mix && (values.only !== undefined || values.broker !== undefined)) {
  console.error(`test:faults: --mix runs the soak alone, on Kafka (no --only, no --broker)\n${HELP}`);
  process.exit(2);
}
const killLoopMs = integer(values['kill-loop-ms'], 'kill-loop-ms', 60_000);
const brokers = (values.broker ?? 'kafka').split(',').map((b) => b.trim().toLowerCase());
for (const b of brokers)
  if (!BROKERS.includes(b)) {
    console.error(`test:faults: --broker takes ${BROKERS.join(', ')} or several, got "${b}"\n${HELP}`);
    process.exit(2);
  }
const files = readdirSync(path.join(testDir, 'src/faults'))
  .filter((f) => f.endsWith('.test.ts') && (!values.only || f.includes(values.only)))
  .map((f) => `src/faults/${f}`);
if (files.length === 0) {
  console.error(`test:faults: no scenario file matches "${values.only}"`);
  process.exit(2);
}
/** What runs on each broker: every file on Kafka, the broker-aware ones on the others. */
const runs = mix
  ? [{ broker: 'kafka', files: [MIX_FILE] }]
  : brokers.flatMap((broker) => {
      const these = (broker === 'kafka' ? files : files.filter((f) => BROKER_FILES.some((b) => f.endsWith(b)))).filter(
        (f) => f !== MIX_FILE,
      );
      return these.length > 0 ? [{ broker, files: these }] : [];
    });
if (runs.length === 0) {
  console.error(`test:faults: no scenario of ${values.only} runs on ${brokers.join(', ')}`);
  process.exit(2);
}

const up = spawnSync(
  process.execPath,
  [
    '--conditions=@postbox/source',
    '--disable-warning=TimeoutNegativeWarning',
    path.join(root, 'packages/api/src/bin/postbox.ts'),
    'stack',
    'up',
  ],
  { stdio: 'inherit' },
);
if (up.status !== 0) process.exit(up.status ?? 1);

const dir = mkdtempSync(path.join(os.tmpdir(), 'postbox-faults-summary-'));
const summary = path.join(dir, 'summary.jsonl');
const started = Date.now();
let rounds = 0;
let failedRounds = 0;
do {
  rounds++;
  for (const run of runs) {
    console.log(
      `\n# test:faults round ${rounds} on ${run.broker}: ${run.files.length} files, ${iterations} iterations, kill loop ${killLoopMs} ms`,
    );
    const code = await new Promise<number | null>((resolve) => {
      const child = spawn(
        process.execPath,
        [
          '--conditions=@postbox/source',
          '--disable-warning=TimeoutNegativeWarning',
          '--test',
          '--test-concurrency=1',
          `--test-timeout=${mix ? Math.max(3_600_000, minutes * 60_000 + 1_800_000) : 3_600_000}`,
          ...run.files,
        ],
        {
          cwd: testDir,
          stdio: 'inherit',
          env: {
            ...process.env,
            POSTBOX_FAULT_ITERATIONS: String(iterations),
            POSTBOX_FAULT_KILL_LOOP_MS: String(killLoopMs),
            // Longer than `npm test` runs them (20 s, 10 s and 25 s there, to keep the suite within its time).
            POSTBOX_FAULT_OUTAGE_MS: process.env.POSTBOX_FAULT_OUTAGE_MS ?? '60000',
            POSTBOX_FAULT_PAUSE_MS: process.env.POSTBOX_FAULT_PAUSE_MS ?? '30000',
            POSTBOX_FAULT_STORM_MS: process.env.POSTBOX_FAULT_STORM_MS ?? '45000',
            POSTBOX_FAULT_SUMMARY: summary,
            POSTBOX_FAULT_BROKER: run.broker,
            POSTBOX_FAULT_FULL: '1',
            ...(mix ? { POSTBOX_FAULT_MIX: '1', POSTBOX_FAULT_MINUTES: String(minutes) } : {}),
            ...(seed ? { POSTBOX_FAULT_SEED: seed } : {}),
          },
        },
      );
      child.on('exit', resolve);
    });
    if (code !== 0) failedRounds++;
  }
} while (!mix && failedRounds === 0 && Date.now() - started < minutes * 60_000);

interface Line {
  scenario: string;
  iterations: number;
  events: number;
  lost: number;
  appliedTwice: number;
  reordered: number;
  duplicatesAbsorbed: number;
  ok: boolean;
  /** The soak's own summary line (faults.mix.test.ts). */
  line?: string;
}
const lines: Line[] = existsSync(summary)
  ? readFileSync(summary, 'utf8')
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Line)
  : [];
rmSync(dir, { recursive: true, force: true });
const sum = (f: (l: Line) => number) => lines.reduce((s, l) => s + f(l), 0);
const t = { lost: sum((l) => l.lost), twice: sum((l) => l.appliedTwice), reordered: sum((l) => l.reordered) };
const notOk = lines.filter((l) => !l.ok).length;
for (const l of lines) if (l.line) console.log(`\n${l.line}`);
if (mix && !lines.some((l) => l.line)) console.log('\nsoak: no summary line (the soak failed before its end)');
const elapsed = Math.round((Date.now() - started) / 1000);
console.log(
  `\nfaults: ${rounds} round(s) in ${elapsed} s, ${new Set(lines.map((l) => l.scenario)).size} scenarios, ${lines.length} scenario runs, ` +
    `${sum((l) => l.iterations)} iterations, ${sum((l) => l.events)} events, ${t.lost} lost, ${t.twice} applied twice, ${t.reordered} reordered, ` +
    `${sum((l) => l.duplicatesAbsorbed)} duplicates absorbed${failedRounds ? `; ${failedRounds} round(s) with failing tests` : ''}`,
);
process.exitCode = failedRounds > 0 || notOk > 0 || t.lost + t.twice + t.reordered > 0 ? 1 : 0;
