import { ConfigError } from '../errors.ts';

/**
 * How the outbox and the inbox are partitioned by time (migration 0017, ADR 0009): the length of one partition's
 * range and how many are kept made ahead. Partitions are appended after the newest one, so a change of period
 * applies from there on; ranges already made keep their length.
 */
export interface PartitionOptions {
  /** One partition's range, in seconds (a day: UTC midnight to midnight). @defaultValue 86400 */
  periodSeconds: number;
  /** Periods kept made ahead of now: the time premaking may be down before rows fall into the default. @defaultValue 7 */
  ahead: number;
  /** How often each process checks that the partitions ahead exist. @defaultValue a quarter period, at most 15 min */
  checkMs: number;
}

const DAY_SECONDS = 86_400;
const MAX_CHECK_MS = 15 * 60_000;

/** Defaults filled in and values checked: a setting that cannot work is a ConfigError naming it. */
export function resolvePartitionOptions(input: Partial<PartitionOptions> = {}): PartitionOptions {
  const periodSeconds = input.periodSeconds ?? DAY_SECONDS;
  if (!Number.isInteger(periodSeconds) || periodSeconds < 1)
    throw new ConfigError(`POSTBOX_PARTITION_PERIOD_S must be a whole number of seconds ≥ 1, got ${periodSeconds}`);
  const ahead = input.ahead ?? 7;
  if (!Number.isInteger(ahead) || ahead < 1 || ahead > 1000)
    throw new ConfigError(`POSTBOX_PARTITION_AHEAD must be a whole number from 1 to 1000, got ${ahead}`);
  const checkMs = input.checkMs ?? Math.min(MAX_CHECK_MS, Math.max(250, (periodSeconds * 1000) / 4));
  if (!Number.isInteger(checkMs) || checkMs < 100)
    throw new ConfigError(`the partition check interval must be a whole number of ms ≥ 100, got ${checkMs}`);
  return { periodSeconds, ahead, checkMs };
}
