-- What the control plane needs to see without asking every process (DESIGN §9).

-- Consumers announce themselves when they start: the control plane finds their Kafka group and topics here to
-- report lag, and lists consumers that have no state yet.
CREATE TABLE consumer_registry (
    consumer_name text PRIMARY KEY,
    group_id text NOT NULL,
    topics text[] NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at timestamptz NOT NULL DEFAULT now()
);

-- Deliveries of an event after the first (absorbed by the inbox). Only duplicates write it, so the common path
-- costs nothing more; it lets event(id) say "duplicate" and the verifier count absorbed duplicates.
ALTER TABLE message_inbox ADD COLUMN duplicate_deliveries integer NOT NULL DEFAULT 0;

-- event(id) looks a failure up by its event, whatever its status.
CREATE INDEX message_failure_event_idx ON message_failure (event_id);
