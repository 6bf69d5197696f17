-- Consumer-side state (seed §8, §12). Every table is keyed by consumer_name: consumers are independent.

-- The inbox: one row per (consumer, event) written in the consumer's business transaction.
CREATE TABLE message_inbox (
    consumer_name text NOT NULL,
    event_id uuid NOT NULL,
    aggregate_id text NOT NULL,
    aggregate_version bigint,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, event_id)
);
CREATE INDEX message_inbox_processed_brin ON message_inbox USING brin (processed_at);

-- The version gate's memory: the last applied version of each aggregate, per consumer. Its row lock
-- serialises two owners of one aggregate during a rebalance.
CREATE TABLE consumer_aggregate_version (
    consumer_name text NOT NULL,
    aggregate_id text NOT NULL,
    last_version bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, aggregate_id)
);

-- Future versions waiting for their gap to close. Never dropped: drained in order when the gap fills.
CREATE TABLE message_parked (
    consumer_name text NOT NULL,
    aggregate_id text NOT NULL,
    aggregate_version bigint NOT NULL,
    event_id uuid NOT NULL,
    topic text NOT NULL,
    broker_partition integer,
    broker_offset bigint,
    -- The record exactly as received (value and headers), so draining replays the same bytes.
    record jsonb NOT NULL,
    expected_version bigint NOT NULL,
    parked_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, aggregate_id, aggregate_version)
);
CREATE INDEX message_parked_age_idx ON message_parked (parked_at);

-- Aggregates a consumer cannot advance: the head event waits for a retry or sits in the failure store.
CREATE TABLE consumer_blocked_aggregate (
    consumer_name text NOT NULL,
    aggregate_id text NOT NULL,
    event_id uuid,
    aggregate_version bigint,
    reason text NOT NULL CHECK (reason IN ('retrying', 'failed')),
    detail text,
    blocked_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, aggregate_id)
);
