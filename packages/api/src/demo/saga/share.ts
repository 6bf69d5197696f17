import { createHash } from 'node:crypto';

/**
 * Whether `key` falls in a share (0–1) of all keys: decided by a hash, not by chance, so asking again about the
 * same order or step gives the same answer (a retried payment is declined again, a lost reply stays lost once).
 */
export function inShare(key: string, share: number): boolean {
  if (share <= 0) return false;
  const point = createHash('sha256').update(key).digest().readUInt32BE(0) / 2 ** 32;
  return point < share;
}
