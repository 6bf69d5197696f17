import type { Queryable } from '../db/connect.ts';

export interface AggregateState {
  /** 0 when this consumer has applied nothing of the aggregate yet. */
  lastVersion: number;
  /** Set when the aggregate is blocked (its head event is in the failure store): that event's id, or null. */
  blockedBy: string | null | undefined;
  /** Whether versions of it wait in message_parked (when the locks were taken): only then is a drain needed. */
  parked: boolean;
}

/**
 * Locks the version rows of the given aggregates for the rest of the transaction, creating missing ones with
 * last_version 0 first, so that even a brand-new aggregate has a row to lock: two owners of one aggregate
 * during a rebalance are serialised here (the second waits, then sees the first one's result). Aggregates are
 * locked in id order so two batches cannot deadlock on each other.
 * Parameters: consumer name, distinct aggregate ids. Rows returned: one per aggregate, with its block if any and
 * whether it has parked versions.
 * Locks: FOR UPDATE on consumer_aggregate_version rows.
 */
export async function lockAggregates(
  sql: Queryable,
  consumer: string,
  aggregateIds: string[],
): Promise<Map<string, AggregateState>> {
  const ids = [...aggregateIds].sort();
  // Three statements pipelined (one write, one round trip): the server still runs them in order, each after the
  // one before it finished, so the state is read after the locks are held.
  const [, , rows] = await Promise.all([
    sql`
      INSERT INTO consumer_aggregate_version (consumer_name, aggregate_id, last_version)
      SELECT ${consumer}, a, 0 FROM unnest(${ids}::text[]) AS a ORDER BY a
      ON CONFLICT (consumer_name, aggregate_id) DO NOTHING`,
    sql`
      SELECT 1 FROM consumer_aggregate_version
      WHERE consumer_name = ${consumer} AND aggregate_id = ANY(${ids}::text[])
      ORDER BY aggregate_id
      FOR UPDATE`,
    // Read in a statement of its own, after the locks are held. In READ COMMITTED a locking SELECT that waited
    // re-reads the locked row but keeps its first snapshot of a joined one: a block a retry has just lifted (and
    // whose parked successors it has drained) would still look present, and the next version would park behind a
    // block that no longer exists — stuck for ever.
    sql<
      { aggregate_id: string; last_version: string; blocked: boolean; blocked_event: string | null; parked: boolean }[]
    >`
      SELECT v.aggregate_id, v.last_version::text, b.aggregate_id IS NOT NULL AS blocked, b.event_id AS blocked_event,
             EXISTS (SELECT 1 FROM message_parked p
                     WHERE p.consumer_name = v.consumer_name AND p.aggregate_id = v.aggregate_id) AS parked
      FROM consumer_aggregate_version v
      LEFT JOIN consumer_blocked_aggregate b ON b.consumer_name = v.consumer_name AND b.aggregate_id = v.aggregate_id
      WHERE v.consumer_name = ${consumer} AND v.aggregate_id = ANY(${ids}::text[])`,
  ]);
  return new Map(
    rows.map((r) => [
      r.aggregate_id,
      { lastVersion: Number(r.last_version), blockedBy: r.blocked ? r.blocked_event : undefined, parked: r.parked },
    ]),
  );
}

/**
 * Stores the new last versions (rows locked by lockAggregates). Parameters: consumer, (aggregate, version) pairs.
 * The ids are also given as `= ANY`, so the index scan reads exactly these rows whatever the statistics say: a
 * consumer whose name the statistics do not know yet (new, or growing faster than autovacuum analyzes) is
 * estimated at one row, and the planner would hash every row of it for each batch — 34 µs per event in the
 * consumer bench, growing with the aggregates, instead of 4.
 */
export async function saveVersions(sql: Queryable, consumer: string, versions: Map<string, number>): Promise<void> {
  if (versions.size === 0) return;
  const ids = [...versions.keys()];
  await sql`
    UPDATE consumer_aggregate_version AS v
    SET last_version = u.last, updated_at = now()
    FROM unnest(${ids}::text[], ${[...versions.values()]}::bigint[]) AS u(aggregate_id, last)
    WHERE v.consumer_name = ${consumer} AND v.aggregate_id = ANY(${ids}::text[]) AND v.aggregate_id = u.aggregate_id`;
}
