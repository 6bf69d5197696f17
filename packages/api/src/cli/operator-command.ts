import { userInfo } from 'node:os';
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import { ConfigError, connect, type Sql } from '@postbox/engine';
import { databaseUrlFor } from '../config/env.ts';
import { linkEnv, type LinkEnv } from '../config/links.ts';

/**
 * What every operator command (failures, sagas, reconcile, gaps, keys, retention, verify) does the same way:
 * parse its options with `--help`/`-h`, print the help, open its database pool and close it, print JSON, turn a
 * mistake in the command line into an exit code, read integers, timestamps and JSON from options, name the actor.
 */

/**
 * A mistake in the command line. A command that reports usage errors prints one line, `postbox <command>:
 * <message> (postbox <command> --help)`, and exits 2; any other lets it reach the entry file like a ConfigError
 * (`postbox: <message> [config_invalid]`, exit 1).
 */
export class UsageError extends ConfigError {}

const HELP_OPTION = { help: { type: 'boolean', short: 'h' } } as const;

type ParseConfig<O extends ParseArgsOptionsConfig> = {
  args: string[];
  options: O & typeof HELP_OPTION;
  allowPositionals: boolean;
};

/** The options as parsed, typed from the command's option table. */
export type OptionValues<O extends ParseArgsOptionsConfig> = ReturnType<typeof parseArgs<ParseConfig<O>>>['values'];

/** A parsed command line: `postbox <command> [verb] [rest…] [options]`. */
export interface CommandLine<O extends ParseArgsOptionsConfig> {
  values: OptionValues<O>;
  verb: string | undefined;
  rest: string[];
}

export interface OperatorCommand<O extends ParseArgsOptionsConfig> {
  /** As typed after `postbox`: `sagas`. */
  name: string;
  help: string;
  /** The options besides `--help`/`-h`, which every command has. */
  options: O;
  /**
   * `required`: without a verb the help is printed and the exit is 2; `optional`: a verb may follow; `none`: no
   * positional argument is accepted.
   */
  verb: 'required' | 'optional' | 'none';
  /**
   * `report`: an unknown or malformed option and a UsageError are one line on stderr and exit 2. `throw`: they go
   * to the entry file (`postbox: <message> [code]`, exit 1).
   */
  usageErrors: 'report' | 'throw';
  /** With `report`: the line names the verb as well, `postbox sagas show: …`. @defaultValue false */
  verbInUsageErrors?: boolean;
  /** The command's work; resolves to its exit code. */
  run(line: CommandLine<O>): Promise<number>;
}

/** A command's entry point, `(argv) => exit code`, from its option table, help and work. */
export function operatorCommand<O extends ParseArgsOptionsConfig>(
  command: OperatorCommand<O>,
): (argv: string[]) => Promise<number> {
  const reports = command.usageErrors === 'report';
  const usage = (prefix: string, message: string): number => {
    console.error(`${prefix}: ${message} (postbox ${command.name} --help)`);
    return 2;
  };
  return async (argv) => {
    let parsed: { values: Record<string, unknown>; positionals: string[] };
    try {
      parsed = parseArgs({
        args: argv,
        allowPositionals: command.verb !== 'none',
        options: { ...command.options, ...HELP_OPTION },
      });
    } catch (error) {
      if (!reports) throw error;
      return usage(`postbox ${command.name}`, (error as Error).message);
    }
    const [verb, ...rest] = parsed.positionals;
    const help = parsed.values.help === true;
    if (help || (command.verb === 'required' && !verb)) {
      console.log(command.help);
      return help ? 0 : 2;
    }
    try {
      return await command.run({ values: parsed.values as OptionValues<O>, verb, rest });
    } catch (error) {
      if (!reports || !(error instanceof UsageError)) throw error;
      const prefix = `postbox ${command.name}${command.verbInUsageErrors ? ` ${verb}` : ''}`;
      return usage(prefix, error.message);
    }
  };
}

/** The operator role's database URL (DATABASE_URL_OPERATOR, else DATABASE_URL), from the links given or read. */
export async function operatorUrl(links?: LinkEnv): Promise<string> {
  return databaseUrlFor('operator', links ?? (await linkEnv()));
}

/** Seconds any one query of an operator command may wait and run (POSTBOX_QUERY_TIMEOUT_S). */
export const QUERY_TIMEOUT_S = 30;
/** The same for commands whose statements copy or scan whole partitions (retention, verify). */
export const LONG_QUERY_TIMEOUT_S = 600;

/**
 * The limit of one query of the command: POSTBOX_QUERY_TIMEOUT_S when set, else the command's default.
 * @throws ConfigError when the variable is not a whole number of seconds ≥ 1
 */
export function queryTimeoutS(fallback: number, env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.POSTBOX_QUERY_TIMEOUT_S;
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1)
    throw new ConfigError(`POSTBOX_QUERY_TIMEOUT_S must be whole seconds ≥ 1, got "${raw}"`);
  return value;
}

/**
 * Opens the command's pool (`postbox-<command>` in pg_stat_activity), runs `work` and ends the pool after it.
 * Every query has a deadline (`query_timeout`, default QUERY_TIMEOUT_S): on a silent network a query's reply
 * would otherwise be awaited for as long as TCP retransmits (many minutes), and an operator's command would hang.
 * A query past it is canceled; when even the cancel goes unanswered its connection is closed, the query fails
 * with QUERY_TIMEOUT, and the command ends with that error (its work is idempotent: run it again once healed).
 */
export async function withDatabase<T>(
  pool: { command: string; url: string; max: number; queryTimeoutS?: number },
  work: (sql: Sql) => Promise<T>,
): Promise<T> {
  const sql = connect({
    url: pool.url,
    max: pool.max,
    applicationName: `postbox-${pool.command}`,
    extra: { query_timeout: queryTimeoutS(pool.queryTimeoutS ?? QUERY_TIMEOUT_S) },
  });
  try {
    return await work(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

export function printJson(value: unknown): void {
  console.log(JSON.stringify(value, null, 2));
}

/**
 * Rows as columns padded to their widest value, under a header of their keys; `(none)` for no rows. `trimEnd`:
 * no trailing spaces after the last column. @defaultValue trimEnd true
 */
export function printTable(rows: Array<Record<string, unknown>>, { trimEnd = true } = {}): void {
  if (rows.length === 0) {
    console.log('(none)');
    return;
  }
  const keys = Object.keys(rows[0]!);
  const widths = keys.map((k) => Math.max(k.length, ...rows.map((r) => String(r[k]).length)));
  for (const line of [Object.fromEntries(keys.map((k) => [k, k])), ...rows]) {
    const text = keys.map((k, i) => String(line[k]).padEnd(widths[i]!)).join('  ');
    console.log(trimEnd ? text.trimEnd() : text);
  }
}

/**
 * An integer option between `min` (default 1) and `max`; `fallback` when it is absent.
 * @throws UsageError `--<name> must be an integer from <min> to <max>, got "<value>"`, or `--<name> is required`
 */
export function integerOption(
  value: unknown,
  name: string,
  { fallback, min = 1, max = Number.MAX_SAFE_INTEGER }: { fallback?: number; min?: number; max?: number } = {},
): number {
  if (value === undefined) {
    if (fallback === undefined) throw new UsageError(`--${name} is required`);
    return fallback;
  }
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new UsageError(`--${name} must be an integer from ${min} to ${max}, got "${String(value)}"`);
  return n;
}

/** A whole number ≥ 0 (a duration, a count); `fallback` when it is absent. @throws UsageError */
export function nonNegativeOption(value: string | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new UsageError(`--${name} must be an integer ≥ 0, got "${value}"`);
  return n;
}

/** @throws UsageError `--<name> must be an ISO timestamp, got "<value>"` */
export function instantOption(value: string, name: string): Date {
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) throw new UsageError(`--${name} must be an ISO timestamp, got "${value}"`);
  return d;
}

/** @throws UsageError `--<name> must be JSON: <why>` */
export function jsonOption(text: string, name: string): unknown {
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new UsageError(`--${name} must be JSON: ${(cause as Error).message}`, { cause });
  }
}

/** Who an audited action is written as: --actor, else POSTBOX_ACTOR, else the OS user. */
export function operatorActor(given: unknown): string {
  if (typeof given === 'string') return given;
  if (process.env.POSTBOX_ACTOR) return process.env.POSTBOX_ACTOR;
  try {
    return userInfo().username;
  } catch {
    return process.env.USER ?? 'operator';
  }
}
