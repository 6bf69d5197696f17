-- postbox:online
-- The (aggregate_id, aggregate_version) registry (ADR 0009). The outbox is about to be partitioned by event_id
-- (0017), and a unique constraint on a partitioned table must contain the partition key: UNIQUE (aggregate_id,
-- aggregate_version) could then only hold inside each partition, and two writers of one version whose ids fall on
-- either side of a boundary would both commit. The guard moves to this unpartitioned table, filled by a statement
-- trigger, so every writer (enqueue, raw INSERTs of tools and older service builds) keeps it: a second writer of a
-- version waits for the first and fails with 23505 in the same statement, as before.
--
-- Rows deleted from the outbox take their keys with them (a lost event re-emitted by reconciliation gets its
-- version back); partitions dropped by retention do not (no trigger fires), and retention prunes the keys itself.

-- postbox:step registry
-- The smallest version-7 id of a millisecond: every id made at `ts` or later sorts at or after it (uuids compare
-- bytewise and a v7 id starts with its 48-bit millisecond time).
CREATE FUNCTION postbox_uuid_floor(ts timestamptz) RETURNS uuid
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '7000' || '8000' || '000000000000')::uuid
$$;

-- The time a version-7 id was made (PostgreSQL 17's uuid_extract_timestamp, kept here so the SQL says which bits).
CREATE FUNCTION postbox_uuid_time(id uuid) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT to_timestamp(('x' || lpad(replace(left(id::text, 13), '-', ''), 16, '0'))::bit(64)::bigint / 1000.0)
$$;

CREATE TABLE message_outbox_key (
    aggregate_id text NOT NULL,
    aggregate_version bigint NOT NULL,
    event_id uuid NOT NULL,
    PRIMARY KEY (aggregate_id, aggregate_version)
);
-- Retention prunes the keys of dropped event ranges by event_id.
CREATE INDEX message_outbox_key_event_brin ON message_outbox_key USING brin (event_id);

CREATE FUNCTION postbox_outbox_key_insert() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO message_outbox_key (aggregate_id, aggregate_version, event_id)
    SELECT aggregate_id, aggregate_version, event_id FROM new_rows;
    RETURN NULL;
END
$$;

CREATE FUNCTION postbox_outbox_key_delete() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM message_outbox_key k USING old_rows o
    WHERE k.aggregate_id = o.aggregate_id AND k.aggregate_version = o.aggregate_version AND k.event_id = o.event_id;
    RETURN NULL;
END
$$;

CREATE FUNCTION postbox_outbox_key_truncate() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    TRUNCATE message_outbox_key;
    RETURN NULL;
END
$$;

CREATE TRIGGER message_outbox_key_insert AFTER INSERT ON message_outbox
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION postbox_outbox_key_insert();
CREATE TRIGGER message_outbox_key_delete AFTER DELETE ON message_outbox
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION postbox_outbox_key_delete();
CREATE TRIGGER message_outbox_key_truncate AFTER TRUNCATE ON message_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION postbox_outbox_key_truncate();

-- postbox:step backfill no-transaction
-- The rows written before the trigger, 10,000 at a time in event_id order, each batch committed: no long
-- transaction, no lock beyond the rows read. Rows written meanwhile have their keys already (ON CONFLICT).
DO $$
DECLARE
    cursor_id uuid := '00000000-0000-0000-0000-000000000000';
    last_id uuid;
BEGIN
    LOOP
        -- FOR KEY SHARE: a row deleted meanwhile is deleted after this batch commits, and its delete trigger then
        -- removes the key written here (without the lock, the key of a row deleted after the snapshot would stay).
        WITH batch AS (
            SELECT aggregate_id, aggregate_version, event_id FROM message_outbox
            WHERE event_id > cursor_id ORDER BY event_id LIMIT 10000
            FOR KEY SHARE
        ), ins AS (
            INSERT INTO message_outbox_key (aggregate_id, aggregate_version, event_id)
            SELECT aggregate_id, aggregate_version, event_id FROM batch
            ON CONFLICT DO NOTHING
        )
        SELECT event_id INTO last_id FROM batch ORDER BY event_id DESC LIMIT 1;
        EXIT WHEN last_id IS NULL;
        cursor_id := last_id;
        COMMIT;
    END LOOP;
END
$$;
