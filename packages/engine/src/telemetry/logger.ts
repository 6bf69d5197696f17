import { pino } from 'pino';

/** The structured log surface Postbox uses. Fields carry ids, versions, positions and codes; never payloads. */
export interface Logger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
  child(fields: Record<string, unknown>): Logger;
}

export function createLogger(options: { level?: string; name?: string } = {}): Logger {
  return pino({ level: options.level ?? 'info', base: options.name ? { name: options.name } : {} }) as unknown as Logger;
}

export const silentLogger: Logger = {
  info() {},
  warn() {},
  error() {},
  child() {
    return silentLogger;
  },
};
