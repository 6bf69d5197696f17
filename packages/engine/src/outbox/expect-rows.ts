import { BusinessConflictError } from '../errors.ts';

/**
 * Maps a conditional UPDATE that matched no row to a typed business conflict (docs/design.md §1): the state changed under
 * the caller, so the transaction must roll back rather than emit an event for a change that did not happen.
 */
export function expectRows<T extends { count: number }>(result: T, expected: number, conflict: string): T {
  if (result.count !== expected) {
    throw new BusinessConflictError(`${conflict} (expected ${expected} row(s), matched ${result.count})`);
  }
  return result;
}
