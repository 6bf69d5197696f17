-- The transactional outbox (seed §4). A row is written in the business transaction and carried to the broker
-- by the relay. Rows are kept after publishing for the audit window (pruned by time, never at confirmation).
--
-- status: pending → publishing (claimed, lease_until set) → published (broker position stored)
--                                \→ pending again (transient failure, available_at pushed by backoff)
--                                \→ failed (permanent error or budget exhausted; last_error says why)

-- Lanes split the outbox between relays: a lane is leased by one relay at a time (see relay/lanes.ts), and an
-- aggregate always hashes to the same lane, so one aggregate is in flight in one place at a time.
CREATE TABLE relay_lane (
    lane smallint PRIMARY KEY CHECK (lane >= 0),
    owner text,
    lease_until timestamptz,
    owned_since timestamptz
);
INSERT INTO relay_lane (lane) SELECT generate_series(0, 15);

-- Live relays announce themselves; each takes a fair share of the lanes (lanes / live relays).
CREATE TABLE relay_instance (
    owner text PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE message_outbox (
    -- Sequence order inside a lane is the order a relay sends in. It is not commit order, but an aggregate's
    -- versions are written by serialised transactions (its business row is locked), so within an aggregate it is.
    seq bigint GENERATED ALWAYS AS IDENTITY,
    event_id uuid PRIMARY KEY,
    event_type text NOT NULL,
    schema_version integer NOT NULL,
    aggregate_id text NOT NULL,
    aggregate_version bigint NOT NULL,
    topic text NOT NULL,
    -- 16 lanes, matching the rows of relay_lane. The mask keeps hashtext's sign bit out (abs() overflows).
    lane smallint NOT NULL GENERATED ALWAYS AS ((hashtext(aggregate_id) & 2147483647) % 16) STORED,
    -- The serialized data, stored as the exact bytes the relay sends (it never parses payloads).
    payload bytea NOT NULL,
    producer text NOT NULL,
    occurred_at timestamptz NOT NULL,
    traceparent text,
    tracestate text,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'publishing', 'published', 'failed')),
    attempts integer NOT NULL DEFAULT 0,
    available_at timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz,
    lease_owner text,
    published_at timestamptz,
    broker_partition integer,
    broker_offset bigint,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Set when an operator replays an edited payload: the new event references the one it replaces.
    replaces_event_id uuid,
    UNIQUE (aggregate_id, aggregate_version)
);

-- The seed's ready index, keyed for the claim the relay runs: per lane, in sequence order. The seed keyed it by
-- (available_at, created_at); a lane-ordered claim needs (lane, seq) to read the head of its lane.
CREATE INDEX message_outbox_ready_idx
    ON message_outbox (lane, seq)
    WHERE status IN ('pending', 'publishing');

-- Rows in flight right now: few at any time. A relay taking over a lane waits until the previous owner's
-- leases in it have ended, so it never overtakes an in-flight batch of the same aggregates.
CREATE INDEX message_outbox_publishing_idx ON message_outbox (lane, lease_until) WHERE status = 'publishing';

CREATE INDEX message_outbox_failed_idx ON message_outbox (created_at) WHERE status = 'failed';
-- Pruning and age queries scan by time; BRIN stays tiny on an append-mostly table.
CREATE INDEX message_outbox_created_brin ON message_outbox USING brin (created_at);

-- Every claim and mark is an UPDATE; vacuum early and often so dead index entries do not pile up under the
-- ready index (DESIGN §5: the claim rate falls fast otherwise).
ALTER TABLE message_outbox SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.02
);

-- Command idempotency (DESIGN §4): the same (scope, key) with the same request returns the first result.
CREATE TABLE command_idempotency (
    scope text NOT NULL,
    key text NOT NULL,
    request_hash text NOT NULL,
    result jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key)
);
