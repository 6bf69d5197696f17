import { pino, type DestinationStream } from 'pino';

/**
 * The structured log surface Postbox uses. Fields carry ids, versions, positions and codes (log-fields.ts);
 * never payloads.
 */
export interface Logger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
  child(fields: Record<string, unknown>): Logger;
}

export interface LoggerOptions {
  /** @defaultValue 'info' */
  level?: string;
  name?: string;
  /** Where the JSON lines go. @defaultValue stdout */
  destination?: DestinationStream;
}

/**
 * A belt under the rule that no call site logs a payload: whatever sits under these keys is replaced before the
 * line is written, at any of the first two levels of nesting.
 */
export const REDACTED_PATHS = ['data', 'payload', 'value', 'envelope', '*.data', '*.payload', '*.value', '*.envelope'];

export function createLogger(options: LoggerOptions = {}): Logger {
  const settings = {
    level: options.level ?? 'info',
    base: options.name ? { name: options.name } : {},
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
  };
  return (options.destination ? pino(settings, options.destination) : pino(settings)) as unknown as Logger;
}

export const silentLogger: Logger = {
  info() {},
  warn() {},
  error() {},
  child() {
    return silentLogger;
  },
};
