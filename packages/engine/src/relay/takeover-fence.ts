/**
 * Until when a relay taking a lane over holds back, for a batch its previous owner may have claimed although the
 * database no longer says so: the claim's record commits asynchronously (ADR 0010), so a server crash right
 * after it can lose it, and the batch's own lease goes with it. That claim came before `lastClaimBefore` (the
 * previous lease's end or the server's start, whichever came first: queries/relay-lanes.ts), and a batch's
 * publish ends within its lease of its claim — the same bound the lost record would have given. Null: nothing
 * to wait for (a lane never held; one given back keeps its lease's end, so its fence goes with it). See ADR 0011.
 */
export function takeoverFence(lastClaimBefore: Date | null, batchLeaseMs: number): Date | null {
  return lastClaimBefore === null ? null : new Date(lastClaimBefore.getTime() + batchLeaseMs);
}
