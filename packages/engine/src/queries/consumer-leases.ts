import type { Queryable } from '../db/connect.ts';

/** A partition of a topic, as the lease rows name it. */
export interface LeasedPartition {
  topic: string;
  partition: number;
}

/** Announces `owner` as a live member of `group`. Locks: its own consumer_member row. */
export async function memberHeartbeat(sql: Queryable, group: string, owner: string): Promise<void> {
  await sql`
    INSERT INTO consumer_member (group_id, owner) VALUES (${group}, ${owner})
    ON CONFLICT (group_id, owner) DO UPDATE SET heartbeat_at = now()`;
}

/** Creates the lease rows of partitions the group has none for yet (a new group, a topic grown). Locks: none held. */
export async function ensureLeaseRows(sql: Queryable, group: string, partitions: LeasedPartition[]): Promise<void> {
  if (partitions.length === 0) return;
  await sql`
    INSERT INTO consumer_partition_lease (group_id, topic, partition)
    SELECT ${group}, t.topic, t.partition
    FROM unnest(${partitions.map((p) => p.topic)}::text[], ${partitions.map((p) => p.partition)}::int[])
         AS t(topic, partition)
    ON CONFLICT DO NOTHING`;
}

/**
 * Live members of the group (heartbeat younger than `ttlMs`) and how many of `topics`' partitions it has.
 * Locks: none.
 */
export async function groupCensus(
  sql: Queryable,
  group: string,
  topics: string[],
  ttlMs: number,
): Promise<{ members: number; partitions: number }> {
  const [row] = await sql<{ members: number; partitions: number }[]>`
    SELECT (SELECT count(*)::int FROM consumer_member
            WHERE group_id = ${group} AND heartbeat_at > now() - ${ttlMs} * interval '1 millisecond') AS members,
           (SELECT count(*)::int FROM consumer_partition_lease
            WHERE group_id = ${group} AND topic = ANY(${topics}::text[])) AS partitions`;
  return row!;
}

/** Extends the leases `owner` still holds in the group. Returns: those partitions. Locks: their rows. */
export async function renewLeases(
  sql: Queryable,
  group: string,
  owner: string,
  leaseMs: number,
): Promise<LeasedPartition[]> {
  return sql<LeasedPartition[]>`
    UPDATE consumer_partition_lease SET lease_until = now() + ${leaseMs} * interval '1 millisecond'
    WHERE group_id = ${group} AND owner = ${owner} AND lease_until > now()
    RETURNING topic, partition`;
}

/**
 * Takes up to `count` of `topics`' partitions that nobody holds or whose lease expired (their member died or
 * stalled). Returns: the partitions taken. Locks: those rows (SKIP LOCKED: two members never take the same one).
 */
export async function acquireLeases(
  sql: Queryable,
  group: string,
  topics: string[],
  owner: string,
  count: number,
  leaseMs: number,
): Promise<LeasedPartition[]> {
  if (count <= 0) return [];
  return sql<LeasedPartition[]>`
    WITH free AS (
      SELECT topic, partition FROM consumer_partition_lease
      WHERE group_id = ${group} AND topic = ANY(${topics}::text[])
        AND (owner IS NULL OR lease_until IS NULL OR lease_until < now())
      ORDER BY topic, partition
      LIMIT ${count}
      FOR UPDATE SKIP LOCKED
    )
    UPDATE consumer_partition_lease AS l
    SET owner = ${owner}, lease_until = now() + ${leaseMs} * interval '1 millisecond', owned_since = now()
    FROM free WHERE l.group_id = ${group} AND l.topic = free.topic AND l.partition = free.partition
    RETURNING l.topic, l.partition`;
}

/** Gives partitions back so another member can take them at once. Locks: their rows. */
export async function releaseLeases(
  sql: Queryable,
  group: string,
  owner: string,
  partitions: LeasedPartition[],
): Promise<void> {
  if (partitions.length === 0) return;
  await sql`
    UPDATE consumer_partition_lease SET owner = NULL, lease_until = NULL, owned_since = NULL
    WHERE group_id = ${group} AND owner = ${owner}
      AND (topic, partition) IN (
        SELECT * FROM unnest(${partitions.map((p) => p.topic)}::text[], ${partitions.map((p) => p.partition)}::int[]))`;
}

/** Leaves the group: releases every partition and forgets the member. Locks: those rows. */
export async function leaveGroup(sql: Queryable, group: string, owner: string): Promise<void> {
  await sql`
    UPDATE consumer_partition_lease SET owner = NULL, lease_until = NULL, owned_since = NULL
    WHERE group_id = ${group} AND owner = ${owner}`;
  await sql`DELETE FROM consumer_member WHERE group_id = ${group} AND owner = ${owner}`;
}

/** Forgets members silent for longer than `ttlMs` · 10, so the census and the table stay small. Locks: those rows. */
export async function forgetDeadMembers(sql: Queryable, group: string, ttlMs: number): Promise<void> {
  await sql`
    DELETE FROM consumer_member
    WHERE group_id = ${group} AND heartbeat_at < now() - ${ttlMs * 10} * interval '1 millisecond'`;
}
