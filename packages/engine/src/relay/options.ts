import { ConfigError } from '../errors.ts';
import { defaultBackoff, type BackoffOptions } from '../retry/backoff.ts';

/** How the relay claims, leases and retries. Resolved once by resolveRelayOptions. */
export interface RelayOptions {
  /** Rows per claim (one publish call). @defaultValue 500 */
  batchSize: number;
  /**
   * Payload bytes per claim: a batch ends at the row that reaches it (at least one row). Bounds what a cycle holds
   * in memory: `maxInFlight` batches of large events would otherwise be up to 500 MiB each. @defaultValue 8 MiB
   */
  maxBatchBytes: number;
  /** How long a claimed row is reserved; must exceed the publish p99. @defaultValue 30000 */
  leaseMs: number;
  /** Lane leases: a relay that stops renewing loses its lanes after this long. @defaultValue 10000 */
  laneLeaseMs: number;
  /** Fallback poll when no wake-up arrives. @defaultValue 1000 */
  pollMs: number;
  /** Lane batches in flight at once, over all lanes. @defaultValue 4 */
  maxInFlight: number;
  /** Attempts before a row ends in `failed`. @defaultValue 50 (about 1.5 h of broker outage at the 2 min cap) */
  maxAttempts: number;
  /** Largest record the broker accepts; bigger rows fail without being sent. @defaultValue 1048576 + 65536 */
  maxMessageBytes: number;
  backoff: BackoffOptions;
}

export const defaultRelayOptions: RelayOptions = {
  batchSize: 500,
  maxBatchBytes: 8 * 1024 * 1024,
  leaseMs: 30_000,
  laneLeaseMs: 10_000,
  pollMs: 1000,
  maxInFlight: 4,
  maxAttempts: 50,
  maxMessageBytes: 1024 * 1024 + 64 * 1024,
  backoff: defaultBackoff,
};

/** Relay options as given: any of them, the backoff's too; the rest default. */
export type RelayOptionsInput = Partial<Omit<RelayOptions, 'backoff'>> & { backoff?: Partial<BackoffOptions> };

export function resolveRelayOptions(partial: RelayOptionsInput = {}): RelayOptions {
  const o = { ...defaultRelayOptions, ...partial, backoff: { ...defaultRelayOptions.backoff, ...partial.backoff } };
  const positive = (name: keyof RelayOptions, value: number) => {
    if (!Number.isInteger(value) || value <= 0) {
      throw new ConfigError(`relay option ${name} must be a positive integer, got ${String(value)}`);
    }
  };
  for (const k of [
    'batchSize',
    'maxBatchBytes',
    'leaseMs',
    'laneLeaseMs',
    'pollMs',
    'maxInFlight',
    'maxAttempts',
    'maxMessageBytes',
  ] as const) {
    positive(k, o[k]);
  }
  if (o.batchSize > 10_000) throw new ConfigError(`relay option batchSize must be at most 10000, got ${o.batchSize}`);
  if (o.leaseMs < 1000) throw new ConfigError(`relay option leaseMs must be at least 1000 ms, got ${o.leaseMs}`);
  const { baseMs, capMs } = o.backoff;
  if (!Number.isInteger(baseMs) || baseMs <= 0 || !Number.isInteger(capMs) || capMs < baseMs) {
    throw new ConfigError(
      `relay backoff must have baseMs a positive integer and capMs an integer ≥ baseMs, got baseMs ${baseMs}, capMs ${capMs}`,
    );
  }
  return o;
}
