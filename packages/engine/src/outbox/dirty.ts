/**
 * Transactions that wrote outbox rows, and the lanes the rows fell in: the transaction helper nudges relays only
 * when there is news, and only about those lanes.
 */
const dirty = new WeakMap<object, Set<number>>();

export function markDirty(tx: object, lanes: readonly number[] = []): void {
  const seen = dirty.get(tx);
  if (seen) for (const lane of lanes) seen.add(lane);
  else dirty.set(tx, new Set(lanes));
}

export function isDirty(tx: object): boolean {
  return dirty.has(tx);
}

/** The lanes a dirty transaction wrote to (empty when it was marked without them: wake every lane). */
export function dirtyLanes(tx: object): number[] {
  return [...(dirty.get(tx) ?? [])];
}
