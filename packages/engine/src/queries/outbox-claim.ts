import type { Queryable } from '../db/connect.ts';

export interface ClaimedRow {
  event_id: string;
  event_type: string;
  schema_version: number;
  aggregate_id: string;
  aggregate_version: string;
  topic: string;
  payload: Buffer;
  producer: string;
  occurred_at: Date;
  traceparent: string | null;
  tracestate: string | null;
  deadline: Date | null;
  /** CloudEvents extension attributes; null (or absent, for rows built outside the claim) when none. */
  extensions?: Record<string, string> | null;
  attempts: number;
  /** The row's lane (absent for rows built outside the claim). */
  lane?: number;
}

export interface ClaimRequest {
  /** The lanes to claim from: the head of each, up to `limit` rows in all. */
  lanes: number[];
  owner: string;
  limit: number;
  leaseMs: number;
}

/**
 * Claims the heads of lanes: per lane, rows in sequence order that are pending and due, or whose lease expired
 * (a relay died after claiming them: they are re-sent with the same event_id), stopping at the first row of the
 * lane that is neither — a row waiting out its backoff, or one leased (a claim whose reply was lost: the fault
 * suite's dropped UPDATE replies let the next cycle claim v6 while v5 sat leased, and v6 reached the topic
 * first); up to `limit` rows over all the lanes, lowest sequence first (so each lane's share is a prefix of its
 * head). Marks them `publishing` with a lease and counts the attempt. Only lanes whose lease `owner` holds are
 * read, so a relay that lost a lane claims nothing in it. Several lanes in one claim is how a relay under a live
 * load sends one batch for what committed across its lanes, rather than a cycle per lane of an event or two.
 * Returns: the claimed rows, in sequence order. Locks: the claimed rows until commit (SKIP LOCKED: a concurrent
 * claimer skips them rather than waiting). Runs in its own short transaction; publishing happens after commit.
 */
export async function claimLaneBatch(sql: Queryable, r: ClaimRequest): Promise<ClaimedRow[]> {
  return sql<ClaimedRow[]>`
    WITH owned AS (
      SELECT lane FROM relay_lane
      WHERE lane = ANY (${r.lanes}::smallint[]) AND owner = ${r.owner} AND lease_until > now()
    ), head AS (
      SELECT h.event_id, h.seq, h.lane, h.ready
      FROM owned l CROSS JOIN LATERAL (
        SELECT event_id, seq, lane,
               (status = 'pending' AND available_at <= now()) OR (status = 'publishing' AND lease_until < now()) AS ready
        FROM message_outbox
        WHERE lane = l.lane AND status IN ('pending', 'publishing')
        ORDER BY seq
        LIMIT ${r.limit}
      ) h
    ), blocked AS (
      SELECT lane, min(seq) AS first FROM head WHERE NOT ready GROUP BY lane
    ), picked AS (
      SELECT o.event_id
      FROM message_outbox o
      JOIN head h ON h.event_id = o.event_id
      LEFT JOIN blocked b ON b.lane = h.lane
      WHERE h.ready AND (b.first IS NULL OR h.seq < b.first)
      ORDER BY o.seq
      LIMIT ${r.limit}
      FOR UPDATE OF o SKIP LOCKED
    )
    UPDATE message_outbox AS o
    SET status = 'publishing',
        lease_until = now() + ${r.leaseMs} * interval '1 millisecond',
        lease_owner = ${r.owner},
        attempts = o.attempts + 1
    FROM picked
    WHERE o.event_id = picked.event_id
    RETURNING o.seq, o.event_id, o.event_type, o.schema_version, o.aggregate_id, o.aggregate_version::text AS aggregate_version,
              o.topic, o.payload, o.producer, o.occurred_at, o.traceparent, o.tracestate, o.deadline, o.extensions,
              o.attempts, o.lane`.then((rows) =>
    [...rows].sort(
      (a, b) => Number((a as unknown as { seq: string }).seq) - Number((b as unknown as { seq: string }).seq),
    ),
  );
}

/**
 * Whether another relay still has live leases in this lane (it owned the lane before and may be sending).
 * Returns: true while such a lease exists. Locks: none.
 */
export async function laneHasForeignLeases(sql: Queryable, lane: number, owner: string): Promise<boolean> {
  const rows = await sql`
    SELECT 1 FROM message_outbox
    WHERE lane = ${lane} AND status = 'publishing' AND lease_until > now() AND lease_owner <> ${owner}
    LIMIT 1`;
  return rows.length > 0;
}
