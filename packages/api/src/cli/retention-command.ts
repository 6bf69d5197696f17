import { ConfigError } from '@postbox/engine';
import {
  checkInboxWindow,
  planRetention,
  RetentionRefusedError,
  runRetention,
  type RetentionPolicy,
  type RetentionProgress,
  type TablePlan,
} from '@postbox/engine/retention';
import { linkEnv } from '../config/links.ts';
import { createBrokerOffsets } from '@postbox/workers';
import { readConfig, readRetentionPolicy } from '../config/env.ts';
import { LONG_QUERY_TIMEOUT_S, operatorCommand, printJson, withDatabase } from './operator-command.ts';

const HELP = `postbox retention — keep the outbox and the inbox small: archive and drop partitions past their window

usage: postbox retention plan [--json] [--as-of TIME]
       postbox retention run [--dry-run] [--json] [--actor NAME] [--as-of TIME [--force]]

plan   what a run would do now (exit 2 when the policy is refused: an inbox window shorter than the broker
       keeps a consumed topic's records): per table its partitions, rows and bytes before and after, the partitions that
       would leave and those held past their window with the reason (unpublished or failed outbox rows, rows
       inside the window)
run    takes each partition out: detach (a lock of milliseconds on the table), export to
       <POSTBOX_ARCHIVE_DIR>/<table>/<partition>.csv.gz with a manifest, verify rows and checksums, drop,
       audited; then purges failure payloads past their window. One run at a time across processes; a run
       stopped half-way is finished by the next. --dry-run records the plan and changes nothing.
--as-of  as if it were TIME (ISO 8601; simulations and tests): a run with it also needs --dry-run or --force

Environment: DATABASE_URL, the broker's (POSTBOX_BROKER, KAFKA_BROKERS …: topic retention is read from it),
POSTBOX_OUTBOX_RETENTION_DAYS (30: the audit window), POSTBOX_INBOX_RETENTION_DAYS (30, or forever),
POSTBOX_FAILURE_RETENTION_DAYS (30), POSTBOX_ARCHIVE_DIR (./postbox-archive).
Exit: 0 done (held partitions included), 1 an error, 2 refused, 3 skipped (another run holds the lock).`;

export const retentionCommand = operatorCommand({
  name: 'retention',
  help: HELP,
  options: {
    json: { type: 'boolean' },
    'dry-run': { type: 'boolean' },
    actor: { type: 'string' },
    'as-of': { type: 'string' },
    force: { type: 'boolean' },
  },
  verb: 'required',
  usageErrors: 'throw',
  async run({ values, verb }) {
    if (verb !== 'plan' && verb !== 'run') throw new ConfigError(`unknown retention command "${verb}" (plan | run)`);
    const now = asOf(values['as-of']);
    if (verb === 'run' && values['as-of'] !== undefined && !values['dry-run'] && !values.force)
      throw new ConfigError(
        '--as-of moves the window: a run would drop partitions still inside the real one; add --dry-run, or --force for a simulation',
      );
    const policy = readRetentionPolicy(process.env);
    // Detach and drop need the tables' owner: retention connects with DATABASE_URL, not an operator role's URL.
    const config = readConfig(await linkEnv());
    const offsets = createBrokerOffsets(config.broker, config.topics);
    const brokerRetention = (topics: string[]) => offsets.retention(topics);
    try {
      return await withDatabase(
        { command: 'retention', url: config.databaseUrl, max: 3, queryTimeoutS: LONG_QUERY_TIMEOUT_S },
        async (sql) => {
          if (verb === 'plan') {
            const refusal = await checkInboxWindow(sql, { policy, brokerRetention });
            const plan = await planRetention(sql, policy, now);
            if (values.json) printJson({ asOf: now, policy, refusal, tables: plan });
            else printPlan(plan, policy, now);
            if (refusal && !values.json) console.log(`refused: ${refusal.reason}`);
            return refusal ? 2 : 0;
          }
          const bar = values.json ? null : progressPrinter();
          let report;
          try {
            report = await runRetention(sql, {
              policy,
              trigger: 'cli',
              actor: values.actor ?? process.env.USER ?? 'cli',
              dryRun: values['dry-run'] ?? false,
              now,
              brokerRetention,
              ...(bar ? { onProgress: bar } : {}),
            });
          } catch (cause) {
            if (!(cause instanceof RetentionRefusedError)) throw cause;
            if (values.json) printJson({ status: 'refused', refusal: cause.refusal });
            else console.log(cause.message);
            return 2;
          }
          if (values.json) {
            printJson(report);
            return report.status === 'skipped' ? 3 : 0;
          }
          if (report.status === 'skipped') {
            console.log(`run ${report.runId}: skipped — another retention run holds the lock`);
            return 3;
          }
          printPlan(report.plan, policy, now);
          const dropped = report.partitions.filter((p) => p.outcome === 'dropped');
          const held = report.plan.reduce((a, t) => a + t.held.length, 0) + report.partitions.length - dropped.length;
          console.log(
            `run ${report.runId}${report.dryRun ? ' (dry run: nothing changed)' : ''}: ${dropped.length} partitions archived and dropped (${fmt(dropped.reduce((a, p) => a + p.rows, 0))} rows), ${held} held; ${report.failurePayloadsPurged} failure payloads purged${report.defaultSwept > 0 ? `; ${report.defaultSwept} partitions made for default-partition rows past the window` : ''}`,
          );
          return 0;
        },
      );
    } finally {
      await offsets.close();
    }
  },
});

function asOf(value: string | undefined): Date {
  if (value === undefined) return new Date();
  const t = new Date(value);
  if (Number.isNaN(t.getTime())) throw new ConfigError(`--as-of must be an ISO 8601 time, got "${value}"`);
  return t;
}

function printPlan(plan: TablePlan[], policy: RetentionPolicy, now: Date): void {
  console.log(`retention plan at ${now.toISOString()} — archive: ${policy.archiveDir}`);
  for (const t of plan) {
    console.log(
      `${t.table}  window ${t.windowDays === null ? 'forever' : `${t.windowDays} d (ranges ending by ${t.cutoff!.toISOString()})`}\n` +
        `  before  ${t.before.partitions} partitions  ${fmt(t.before.rows)} rows  ${mib(t.before.bytes)}\n` +
        `  after   ${t.after.partitions} partitions  ${fmt(t.after.rows)} rows  ${mib(t.after.bytes)}`,
    );
    for (const c of t.candidates)
      console.log(`  leaves  ${c.partition}  ${range(c.from, c.to)}  ~${fmt(c.rows)} rows  ${mib(c.bytes)}`);
    for (const h of t.held) console.log(`  held    ${h.partition}  ${range(h.from, h.to)}: ${h.reason}`);
    if (t.candidates.length === 0 && t.held.length === 0) console.log('  nothing past the window');
    if (t.defaultRows > 0)
      console.log(`  default partition: ~${fmt(t.defaultRows)} rows outside every range (see docs/operations.md)`);
  }
}

/** One line per step; on a terminal, a bar on stderr that the lines scroll above. */
function progressPrinter(): (e: RetentionProgress) => void {
  const tty = process.stderr.isTTY;
  return (e) => {
    const line = `${e.table}  ${e.partition}  ${e.step}${e.rows !== undefined ? `  ${fmt(e.rows)} rows` : ''}${e.detail ? `: ${e.detail}` : ''}`;
    if (!tty) return void console.log(line);
    const done = e.step === 'dropped' || e.step === 'held' ? e.done + 1 : e.done;
    const width = 30;
    const filled = e.total === 0 ? width : Math.round((done / e.total) * width);
    process.stderr.write(`\r\x1b[K`);
    console.log(line);
    process.stderr.write(`[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${done}/${e.total} partitions`);
    if (done === e.total) process.stderr.write('\n');
  };
}

function range(from: Date | null, to: Date): string {
  return `[${from ? from.toISOString() : '…'}, ${to.toISOString()})`;
}

function fmt(n: number): string {
  return n.toLocaleString('en-US');
}

function mib(bytes: number): string {
  return `${(bytes / 1048576).toFixed(1)} MiB`;
}
