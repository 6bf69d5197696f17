import { check } from './check.ts';
import { collect, type CollectDeps, type VerifyConsumer } from './collect.ts';
import type { CheckOptions } from './options.ts';
import type { VerifyReport } from './report.ts';

/**
 * The verifier (`postbox verify`, and the end of every fault scenario): collect what the log and PostgreSQL say,
 * then check it. `report.ok` is false, with one Violation per broken invariant (violations.ts), on any loss,
 * double effect, reorder, silent conflict, stuck state or log anomaly (and, with `final`, anything in flight).
 */
export async function verify(
  deps: CollectDeps,
  consumers: VerifyConsumer[],
  options: Partial<CheckOptions> = {},
): Promise<VerifyReport> {
  return check(await collect(deps, consumers), options);
}
