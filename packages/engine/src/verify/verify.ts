import { check, type CheckOptions, type VerifyReport } from './check.ts';
import { collect, type CollectDeps, type VerifyConsumer } from './collect.ts';

/**
 * The verifier (`postbox verify`, and the end of every fault scenario): collect what the log and PostgreSQL say,
 * then check it. `report.ok` is false, with one line per violation, on any loss, double effect, reorder, silent
 * conflict, stuck state or log anomaly (and, with `final`, anything still in flight).
 */
export async function verify(deps: CollectDeps, consumers: VerifyConsumer[], options: Partial<CheckOptions> = {}): Promise<VerifyReport> {
  return check(await collect(deps, consumers), options);
}
