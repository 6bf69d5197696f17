/**
 * The version gate (docs/design.md §6), pure: given the last version this consumer applied for an aggregate (undefined
 * when it has applied none) and an arriving version, decide what happens to the event.
 *
 * - `v ≤ last`           → ignore (an old or re-sent version; counted, never applied twice)
 * - `v = last + 1`       → apply (then the caller drains parked successors)
 * - `v > last + 1`       → park (durably, until the gap fills; never dropped)
 * - no version applied yet: policy 'strict' applies only v = 1 (anything else parks, waiting for 1);
 *   policy 'adopt' applies whatever arrives first and makes it the baseline (a consumer that joins a topic late).
 */
export type FirstVersionPolicy = 'strict' | 'adopt';
export type GateDecision = 'apply' | 'ignore' | 'park';

export function gate(last: number | undefined, version: number, policy: FirstVersionPolicy): GateDecision {
  if (last === undefined) {
    if (policy === 'adopt' || version === 1) return 'apply';
    return 'park';
  }
  if (version <= last) return 'ignore';
  if (version === last + 1) return 'apply';
  return 'park';
}

/** The version a parked event waits for: the one after the last applied (1 when none was applied). */
export function expectedVersion(last: number | undefined): number {
  return (last ?? 0) + 1;
}
