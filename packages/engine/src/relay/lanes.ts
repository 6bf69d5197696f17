import type { Sql } from '../db/connect.ts';
import {
  acquireLanes,
  type AcquiredLane,
  forgetDeadRelays,
  heartbeat,
  laneCensus,
  releaseLane,
  renewLanes,
} from '../queries/relay-lanes.ts';

/**
 * Lane leases: each live relay holds about lanes / live-relays lanes and renews them every third of the lease.
 * A relay that dies stops renewing; after the lease its lanes are free and the others take them. Ownership is
 * checked again inside every claim (queries/outbox-claim.ts), so a relay that lost a lane claims nothing in it.
 */
export interface LaneChanges {
  owned: Set<number>;
  /** Lanes taken over (not held before), with what their previous owner may still have in flight. */
  gained: AcquiredLane[];
  lost: number[];
  /** Lanes above the fair share; the relay releases them once their in-flight batch has settled. */
  surplus: number[];
}

export async function balanceLanes(
  sql: Sql,
  owner: string,
  leaseMs: number,
  current: ReadonlySet<number>,
): Promise<LaneChanges> {
  await heartbeat(sql, owner);
  const renewed = new Set(await renewLanes(sql, owner, leaseMs));
  const { relays, lanes } = await laneCensus(sql, leaseMs);
  const share = Math.ceil(lanes / Math.max(1, relays));
  const gained = renewed.size < share ? await acquireLanes(sql, owner, share - renewed.size, leaseMs) : [];
  const owned = new Set([...renewed, ...gained.map((g) => g.lane)]);
  const lost = [...current].filter((l) => !owned.has(l));
  const surplus = [...owned].sort((a, b) => b - a).slice(0, Math.max(0, owned.size - share));
  if (Math.random() < 0.05) await forgetDeadRelays(sql, leaseMs);
  return { owned, gained: gained.filter((g) => !current.has(g.lane)), lost, surplus };
}

export { releaseLane };
