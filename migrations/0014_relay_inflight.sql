-- The relay's claim writes nothing per event (docs/design.md §5, "Claim"). Until now a claim UPDATEd every row it
-- took to `publishing` with a lease, and the mark UPDATEd it again to `published`: two row versions of ~1 KiB per
-- event, measured at 108 µs of machine CPU per event (claim + mark, batch 500, 4 claimers); reading the head with
-- a SELECT and keeping only the mark costs 28 µs. The per-row lease is not needed to fence relays: a lane is
-- owned by one relay at a time (relay_lane), and one relay never runs a lane in two cycles at once. What the row
-- lease still did is recorded per lane instead, in one small row the claim and the mark update:
--   sending_to      the highest seq of the lane's batch in flight (rows ≤ it, pending and due, are `publishing`)
--   sending_until   the batch's lease: a relay taking the lane over waits until it has passed; NULL once settled
--   owner           the relay that sent it
-- A batch never settled (its relay died, or lost a reply) leaves sending_until set: the next claim in the lane
-- counts that unrecorded attempt for the rows it covers.
CREATE TABLE relay_lane_inflight (
    lane smallint PRIMARY KEY REFERENCES relay_lane (lane),
    owner text,
    sending_to bigint,
    sending_until timestamptz
);
INSERT INTO relay_lane_inflight (lane) SELECT lane FROM relay_lane;

-- The seed's observable states of an outbox row, as readers see them: `status` is the stored one except for a
-- pending row inside its lane's batch in flight, which is `publishing` (lease_until = the batch's lease). Rows
-- written `publishing` by relays from before this migration keep their own lease. `stored_status` is the
-- column itself: filter on it so the partial indexes apply.
CREATE VIEW message_outbox_state AS
SELECT o.event_id, o.seq, o.lane, o.topic, o.aggregate_id, o.aggregate_version, o.event_type, o.attempts,
       o.available_at, o.published_at, o.broker_partition, o.broker_offset, o.last_error, o.created_at,
       o.status AS stored_status,
       CASE WHEN o.status = 'pending' AND f.sending_until > now() AND o.seq <= f.sending_to AND o.available_at <= now()
            THEN 'publishing' ELSE o.status END AS status,
       CASE WHEN o.status = 'publishing' THEN o.lease_until
            WHEN o.status = 'pending' AND f.sending_until > now() AND o.seq <= f.sending_to AND o.available_at <= now()
            THEN f.sending_until END AS lease_until
FROM message_outbox o
LEFT JOIN relay_lane_inflight f ON f.lane = o.lane;
