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
  /**
   * Payload bytes the batch may hold: rows are taken while the bytes before them are under it, so a batch holds at
   * least one row and ends past the limit by less than its last row.
   */
  maxBytes: number;
  leaseMs: number;
}

/**
 * Reads the heads of lanes: per lane, rows in sequence order that are pending and due (or written `publishing`
 * by a relay from before migration 0014 whose lease expired), stopping at the first row of the lane that is
 * neither — a row waiting out its backoff, or one such an older relay still leases; up to `limit` rows over all
 * the lanes, lowest sequence first (so each lane's share is a prefix of its head), and while the payload bytes
 * before a row are under `maxBytes` (a batch of large events stays bounded in the relay's memory). Only lanes
 * whose lease `owner` holds are read, so a relay that lost a lane reads nothing in it. Several lanes in one claim
 * is how a relay under a live load sends one batch for what committed across its lanes.
 *
 * Writes nothing per row (migration 0014): the lane owns the rows, and one relay never runs a lane in two
 * cycles at once, so no other claimer can take them. Per lane read, one small row records the batch in flight
 * (relay_lane_inflight: its last seq and lease), which makes the rows observably `publishing` and tells a relay
 * taking the lane over how long to wait. `attempts` returned is this attempt's number: the stored count + 1,
 * + 1 more for rows of a batch that was sent and never settled (its relay died before the mark).
 *
 * Commits without waiting for the WAL flush (synchronous_commit off for this statement's transaction alone): it
 * writes only that lease record, no event and no event's state, so a live-load cycle waits for one flush (its
 * mark's) instead of two. What a server crash within the WAL writer's delay of a claim can then lose:
 * docs/adr/0010-claim-commits-asynchronously.md; the takeover fence that keeps one batch per lane in flight
 * all the same: docs/adr/0011-takeover-fence.md.
 * Run it on the pool, never inside a transaction: there the setting would reach every write of that transaction.
 *
 * Returns: the rows, in sequence order. Locks: the lanes' relay_lane_inflight rows until the statement ends.
 */
export async function claimLaneBatch(sql: Queryable, r: ClaimRequest): Promise<ClaimedRow[]> {
  return sql<ClaimedRow[]>`
    WITH commit_mode AS (
      -- Local to this statement's transaction: only the claim's commit is asynchronous (see above).
      SELECT set_config('synchronous_commit', 'off', true)
    ), owned AS (
      SELECT l.lane, f.sending_to, f.sending_until
      FROM commit_mode CROSS JOIN relay_lane l JOIN relay_lane_inflight f ON f.lane = l.lane
      WHERE l.lane = ANY (${r.lanes}::smallint[]) AND l.owner = ${r.owner} AND l.lease_until > now()
    ), head AS (
      SELECT h.event_id, h.seq, h.lane, h.ready, h.bytes
      FROM owned l CROSS JOIN LATERAL (
        -- octet_length reads a stored payload's size from its header: nothing is detoasted here.
        SELECT event_id, seq, lane, octet_length(payload) AS bytes,
               (status = 'pending' AND available_at <= now()) OR (status = 'publishing' AND lease_until < now()) AS ready
        FROM message_outbox
        WHERE lane = l.lane AND status IN ('pending', 'publishing')
        ORDER BY seq
        LIMIT ${r.limit}
      ) h
    ), blocked AS (
      SELECT lane, min(seq) AS first FROM head WHERE NOT ready GROUP BY lane
    ), counted AS (
      SELECT h.event_id, h.seq, h.lane, h.bytes
      FROM head h LEFT JOIN blocked b ON b.lane = h.lane
      WHERE h.ready AND (b.first IS NULL OR h.seq < b.first)
      ORDER BY h.seq
      LIMIT ${r.limit}
    ), sized AS (
      SELECT event_id, seq, lane, sum(bytes) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) - bytes AS before
      FROM counted
    ), picked AS (
      SELECT event_id, seq, lane FROM sized WHERE before < ${r.maxBytes}
    ), sending AS (
      UPDATE relay_lane_inflight AS f
      SET owner = ${r.owner}, sending_to = t.top,
          sending_until = now() + ${r.leaseMs} * interval '1 millisecond'
      FROM (SELECT lane, max(seq) AS top FROM picked GROUP BY lane) t
      WHERE f.lane = t.lane
    )
    SELECT o.seq, o.event_id, o.event_type, o.schema_version, o.aggregate_id, o.aggregate_version::text AS aggregate_version,
           o.topic, o.payload, o.producer, o.occurred_at, o.traceparent, o.tracestate, o.deadline, o.extensions,
           o.attempts + 1 + CASE WHEN l.sending_until IS NOT NULL AND o.seq <= l.sending_to AND o.status = 'pending'
                                 THEN 1 ELSE 0 END AS attempts,
           o.lane
    FROM picked p
    JOIN message_outbox o ON o.event_id = p.event_id
    JOIN owned l ON l.lane = o.lane
    ORDER BY o.seq`;
}

/**
 * Whether another relay may still be sending in this lane: it owned the lane before and its batch's lease has
 * not passed; or, from a relay older than migration 0014, a row it leased; or the takeover fence has not passed
 * (`fence`: the end of a batch the previous owner may have claimed and a server crash made us forget, ADR 0010).
 * Returns: true while so. Locks: none.
 */
export async function laneHasForeignLeases(
  sql: Queryable,
  lane: number,
  owner: string,
  fence: Date | null = null,
): Promise<boolean> {
  const rows = await sql`
    SELECT 1 WHERE ${fence}::timestamptz > now()
    UNION ALL
    SELECT 1 FROM relay_lane_inflight
    WHERE lane = ${lane} AND sending_until > now() AND owner <> ${owner}
    UNION ALL
    (SELECT 1 FROM message_outbox
     WHERE lane = ${lane} AND status = 'publishing' AND lease_until > now() AND lease_owner <> ${owner}
     LIMIT 1)
    LIMIT 1`;
  return rows.length > 0;
}
