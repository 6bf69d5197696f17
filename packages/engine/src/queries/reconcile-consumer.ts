import type { Queryable } from '../db/connect.ts';

/** The consumers registered (consumer_registry) on a topic, by name. Parameters: topic. Locks: none. */
export async function consumersOnTopic(sql: Queryable, topic: string): Promise<string[]> {
  const rows = await sql<{ consumer_name: string }[]>`
    SELECT consumer_name FROM consumer_registry WHERE ${topic} = ANY (topics) ORDER BY consumer_name`;
  return rows.map((r) => r.consumer_name);
}

/** Where a consumer stands on an aggregate it has not applied up to the business version. */
export interface ConsumerLag {
  consumer_name: string;
  aggregate_id: string;
  /** The business version (the source's). */
  version: number;
  /** The last version the consumer applied (0: none). */
  last_version: number;
  blocked_reason: 'retrying' | 'failed' | null;
  blocked_version: number | null;
  blocked_event_id: string | null;
  first_parked: number | null;
  parked: number;
}

/**
 * For one page of (aggregate, version) pairs and the given consumers: each (consumer, aggregate) whose applied
 * version is below the business version, with its block and parked events. Bounded by consumers × page.
 * Parameters: consumers, aggregate ids, versions. Locks: none.
 */
export async function consumersBehind(
  sql: Queryable,
  consumers: readonly string[],
  pairs: ReadonlyArray<{ aggregateId: string; version: number }>,
): Promise<ConsumerLag[]> {
  if (consumers.length === 0 || pairs.length === 0) return [];
  const rows = await sql<Array<Record<string, string | null>>>`
    SELECT c.name AS consumer_name, b.id AS aggregate_id, b.v::text AS version,
           coalesce(v.last_version, 0)::text AS last_version, bl.reason AS blocked_reason,
           bl.aggregate_version::text AS blocked_version, bl.event_id::text AS blocked_event_id,
           p.first_parked::text AS first_parked, p.parked::text AS parked
    FROM unnest(${[...consumers]}::text[]) AS c(name)
    CROSS JOIN unnest(${pairs.map((p) => p.aggregateId)}::text[], ${pairs.map((p) => p.version)}::bigint[]) AS b(id, v)
    LEFT JOIN consumer_aggregate_version v ON v.consumer_name = c.name AND v.aggregate_id = b.id
    LEFT JOIN consumer_blocked_aggregate bl ON bl.consumer_name = c.name AND bl.aggregate_id = b.id
    LEFT JOIN LATERAL (
      SELECT min(mp.aggregate_version) AS first_parked, count(*) AS parked FROM message_parked mp
      WHERE mp.consumer_name = c.name AND mp.aggregate_id = b.id) p ON true
    WHERE coalesce(v.last_version, 0) < b.v
    ORDER BY 1, 2`;
  return rows.map((r) => ({
    consumer_name: r.consumer_name!,
    aggregate_id: r.aggregate_id!,
    version: Number(r.version),
    last_version: Number(r.last_version),
    blocked_reason: r.blocked_reason as ConsumerLag['blocked_reason'],
    blocked_version: r.blocked_version === null ? null : Number(r.blocked_version),
    blocked_event_id: r.blocked_event_id ?? null,
    first_parked: r.first_parked === null ? null : Number(r.first_parked),
    parked: Number(r.parked ?? 0),
  }));
}

/** The version a consumer applied of an aggregate (0: none). Parameters: consumer, aggregate. Locks: none. */
export async function appliedVersion(sql: Queryable, consumer: string, aggregateId: string): Promise<number> {
  const [row] = await sql<{ last_version: string }[]>`
    SELECT last_version::text FROM consumer_aggregate_version
    WHERE consumer_name = ${consumer} AND aggregate_id = ${aggregateId}`;
  return row ? Number(row.last_version) : 0;
}

/** The lowest parked version of an aggregate for a consumer, or null. Locks: none. */
export async function firstParked(sql: Queryable, consumer: string, aggregateId: string): Promise<number | null> {
  const [row] = await sql<{ v: string | null }[]>`
    SELECT min(aggregate_version)::text AS v FROM message_parked
    WHERE consumer_name = ${consumer} AND aggregate_id = ${aggregateId}`;
  return row?.v ? Number(row.v) : null;
}

/** Where a consumer stands on an aggregate: the version it applied (0: none) and how many events it parked. */
export interface ConsumerPosition {
  consumer_name: string;
  aggregate_id: string;
  last_version: number;
  parked: number;
}

/**
 * The positions of the given (consumer, aggregate) pairs, for re-examining findings. Parameters: the pairs.
 * Returns: one row per distinct pair. Locks: none.
 */
export async function consumerPositions(
  sql: Queryable,
  pairs: ReadonlyArray<{ consumer: string; aggregateId: string }>,
): Promise<ConsumerPosition[]> {
  if (pairs.length === 0) return [];
  const rows = await sql<Array<{ consumer_name: string; aggregate_id: string; last_version: string; parked: string }>>`
    SELECT DISTINCT b.c AS consumer_name, b.a AS aggregate_id, coalesce(v.last_version, 0)::text AS last_version,
           (SELECT count(*) FROM message_parked mp WHERE mp.consumer_name = b.c AND mp.aggregate_id = b.a)::text AS parked
    FROM unnest(${pairs.map((p) => p.consumer)}::text[], ${pairs.map((p) => p.aggregateId)}::text[]) AS b(c, a)
    LEFT JOIN consumer_aggregate_version v ON v.consumer_name = b.c AND v.aggregate_id = b.a`;
  return rows.map((r) => ({ ...r, last_version: Number(r.last_version), parked: Number(r.parked) }));
}
