/** How strict a check is (check.ts); every invariant file reads the same resolved options. */
export interface CheckOptions {
  /** Leases, pending rows, retries and parked gaps older than this are stuck. @defaultValue 60000 */
  stuckAfterMs: number;
  /** Everything is expected to have settled: events still in flight are a violation too. @defaultValue false */
  final: boolean;
}

export const defaultCheckOptions: CheckOptions = { stuckAfterMs: 60_000, final: false };
