import type { Queryable } from '../db/connect.ts';

/** Announces this relay as alive. Locks: its own relay_instance row. */
export async function heartbeat(sql: Queryable, owner: string): Promise<void> {
  await sql`
    INSERT INTO relay_instance (owner) VALUES (${owner})
    ON CONFLICT (owner) DO UPDATE SET heartbeat_at = now()`;
}

/** Number of relays whose heartbeat is younger than `ttlMs`, and the number of lanes. Locks: none. */
export async function laneCensus(sql: Queryable, ttlMs: number): Promise<{ relays: number; lanes: number }> {
  const [row] = await sql<{ relays: number; lanes: number }[]>`
    SELECT (SELECT count(*)::int FROM relay_instance WHERE heartbeat_at > now() - ${ttlMs} * interval '1 millisecond') AS relays,
           (SELECT count(*)::int FROM relay_lane) AS lanes`;
  return row!;
}

/** Extends the leases of the lanes `owner` still holds. Returns: those lanes. Locks: their rows. */
export async function renewLanes(sql: Queryable, owner: string, leaseMs: number): Promise<number[]> {
  const rows = await sql<{ lane: number }[]>`
    UPDATE relay_lane SET lease_until = now() + ${leaseMs} * interval '1 millisecond'
    WHERE owner = ${owner} AND lease_until > now()
    RETURNING lane`;
  return rows.map((r) => r.lane);
}

/** A lane just taken, and what its previous owner may still have in flight there. */
export interface AcquiredLane {
  lane: number;
  /**
   * A moment after the previous owner's last claim in this lane — its lease's end (or when it gave the lane
   * back), or the server's last start or crash recovery if that came first: a claim needs a live lease (committed
   * synchronously, so durable), and the claim's record (committed asynchronously, ADR 0010) can only have been
   * lost before the server went down. Null when the lane was never held.
   */
  lastClaimBefore: Date | null;
}

/**
 * Takes up to `count` lanes that nobody holds or whose lease expired (their relay died or stalled).
 * Returns: the lanes taken, each with when its previous owner claimed last at the latest (for the takeover
 * fence, relay/takeover-fence.ts). Locks: those rows (SKIP LOCKED: two relays never take the same lane).
 */
export async function acquireLanes(
  sql: Queryable,
  owner: string,
  count: number,
  leaseMs: number,
): Promise<AcquiredLane[]> {
  if (count <= 0) return [];
  const rows = await sql<{ lane: number; last_claim_before: Date | null }[]>`
    WITH free AS (
      SELECT lane, lease_until FROM relay_lane
      WHERE owner IS NULL OR lease_until IS NULL OR lease_until < now()
      ORDER BY lane
      LIMIT ${count}
      FOR UPDATE SKIP LOCKED
    ), server AS (
      -- A crash recovery does not restart the postmaster, but it resets the shared statistics (PostgreSQL 15+).
      SELECT greatest(pg_postmaster_start_time(), (SELECT stats_reset FROM pg_stat_bgwriter)) AS started_at
    )
    UPDATE relay_lane AS l
    SET owner = ${owner}, lease_until = now() + ${leaseMs} * interval '1 millisecond', owned_since = now()
    FROM free CROSS JOIN server
    WHERE l.lane = free.lane
    RETURNING l.lane,
              CASE WHEN free.lease_until IS NULL THEN NULL
                   ELSE least(free.lease_until, server.started_at) END AS last_claim_before`;
  return rows.map((r) => ({ lane: r.lane, lastClaimBefore: r.last_claim_before }));
}

/**
 * Gives a lane back so another relay can take it at once. The lease ends now rather than vanishing: the next
 * owner's takeover fence (acquireLanes) is then computed from it, so a lane given back while it still waited out
 * a fence (taken right after a crash, then released as surplus) keeps that wait. Locks: the lane's row.
 */
export async function releaseLane(sql: Queryable, owner: string, lane: number): Promise<void> {
  await sql`
    UPDATE relay_lane SET owner = NULL, lease_until = least(lease_until, now()), owned_since = NULL
    WHERE lane = ${lane} AND owner = ${owner}`;
}

/** Leaves the relay set: releases every lane (as releaseLane) and forgets the instance. Locks: those rows. */
export async function leaveRelaySet(sql: Queryable, owner: string): Promise<void> {
  await sql`
    UPDATE relay_lane SET owner = NULL, lease_until = least(lease_until, now()), owned_since = NULL
    WHERE owner = ${owner}`;
  await sql`DELETE FROM relay_instance WHERE owner = ${owner}`;
}

/** Forgets relays silent for longer than `ttlMs` · 10, so the census and the table stay small. Locks: those rows. */
export async function forgetDeadRelays(sql: Queryable, ttlMs: number): Promise<void> {
  await sql`DELETE FROM relay_instance WHERE heartbeat_at < now() - ${ttlMs * 10} * interval '1 millisecond'`;
}
