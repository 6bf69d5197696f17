import { checkConsumer } from './invariants/consumer.ts';
import { checkLog } from './invariants/log.ts';
import { checkSagas } from './invariants/sagas.ts';
import type { Observation } from '../records/observation.ts';
import { defaultCheckOptions, type CheckOptions } from './options.ts';
import type { VerifyReport } from './report.ts';

/**
 * The verifier's checks, pure over an Observation (records/observation.ts), at two levels after Jepsen's Kafka checks:
 * the log, outbox ↔ topic (invariants/log.ts), then each consumer: its events (invariants/consumer.ts) and its
 * side effects (invariants/effects.ts); and the sagas (invariants/sagas.ts). Every invariant is named in violations.ts; `ok` means none is violated.
 */
export function check(o: Observation, options: Partial<CheckOptions> = {}): VerifyReport {
  const opts: CheckOptions = { ...defaultCheckOptions, ...options };
  const log = checkLog(o, opts);
  const consumers = o.consumers.map((c) => checkConsumer(o, c, opts));
  const sagas = o.sagas ? checkSagas(o.sagas, o, opts) : null;
  const violations = [...log.violations, ...consumers.flatMap((c) => c.violations), ...(sagas?.violations ?? [])];
  return {
    at: new Date(o.at).toISOString(),
    ok: violations.length === 0,
    violations,
    options: opts,
    log: log.report,
    consumers: consumers.map((c) => c.report),
    sagas: sagas?.report ?? null,
  };
}
