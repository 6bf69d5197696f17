-- Failures and retries (seed §10, §11).

-- The failure store. payload keeps the raw bytes as received (they may not be JSON at all); envelope is the
-- parsed envelope when there was one.
CREATE TABLE message_failure (
    failure_id bigserial PRIMARY KEY,
    consumer_name text NOT NULL,
    event_id uuid,
    event_type text,
    aggregate_id text,
    aggregate_version bigint,
    topic text,
    broker_partition integer,
    broker_offset bigint,
    payload bytea,
    headers jsonb,
    envelope jsonb,
    error_code text NOT NULL,
    error_detail text NOT NULL,
    attempts integer NOT NULL,
    first_failed_at timestamptz NOT NULL,
    last_failed_at timestamptz NOT NULL,
    status text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'replayed', 'skipped', 'expired')),
    replayed_at timestamptz,
    payload_purged_at timestamptz
);
CREATE INDEX message_failure_consumer_idx ON message_failure (consumer_name, status, last_failed_at);
CREATE UNIQUE INDEX message_failure_open_event_idx
    ON message_failure (consumer_name, event_id) WHERE status = 'open' AND event_id IS NOT NULL;

-- The retry ledger: the truth of every scheduled retry. The BullMQ job is only the alarm clock.
CREATE TABLE message_retry (
    consumer_name text NOT NULL,
    event_id uuid NOT NULL,
    aggregate_id text NOT NULL,
    aggregate_version bigint NOT NULL,
    topic text NOT NULL,
    record jsonb NOT NULL,
    attempt integer NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    first_failed_at timestamptz NOT NULL,
    deadline timestamptz,
    last_error_code text NOT NULL,
    last_error text NOT NULL,
    status text NOT NULL DEFAULT 'scheduled' CHECK (status IN ('scheduled', 'done', 'exhausted', 'expired')),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, event_id)
);
CREATE INDEX message_retry_due_idx ON message_retry (next_attempt_at) WHERE status = 'scheduled';

-- Every operator action: who, what, why, the state before and after.
CREATE TABLE operator_audit (
    audit_id bigserial PRIMARY KEY,
    actor text NOT NULL,
    action text NOT NULL,
    reason text,
    target text,
    before jsonb,
    after jsonb,
    outcome text NOT NULL DEFAULT 'ok',
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX operator_audit_at_idx ON operator_audit (at);
