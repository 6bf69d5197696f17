// @postbox/engine/testing, for tests only: seed engine state and compute what the engine writes.
export { scheduleRetry } from './queries/retry-ledger.ts';
export { formatTraceparent } from './telemetry/trace-context.ts';
export { readMigrations } from './migrate/runner.ts';
