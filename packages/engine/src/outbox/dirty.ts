/** Transactions that wrote outbox rows, so the transaction helper nudges relays only when there is news. */
const dirty = new WeakSet<object>();

export function markDirty(tx: object): void {
  dirty.add(tx);
}

export function isDirty(tx: object): boolean {
  return dirty.has(tx);
}
