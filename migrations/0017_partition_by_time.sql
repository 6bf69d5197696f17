-- postbox:online
-- The outbox and the inbox partitioned by time (ADR 0009; seed §4, §8): RANGE (event_id), the bounds the smallest
-- version-7 id of each period, so both primary keys (event_id; consumer_name, event_id) keep the partition key and
-- stay global — an event id is unique across every partition, and a redelivery lands in the partition of its
-- first delivery, whichever boundary has passed since. Retention then drops whole partitions: no DELETE, no bloat.
--
-- An existing table is converted without a long lock: a NOT VALID bound is added (milliseconds), validated while
-- writes go on, and one short transaction renames the table, makes the partitioned parent and attaches the old
-- table as its first partition (`<table>_p_legacy`: no scan, the validated bound proves it). Writers wait for that
-- transaction only (lock_timeout, retried by the runner). The legacy partition takes ids below the bound (two days
-- ahead; for an empty table, today) and is dropped by retention like any other once past the window. Ids outside every range (an old id replayed, a clock far off) go to the `<table>_p_default` partition.

-- postbox:step functions
-- The start of the period holding `ts`, periods counted from the Unix epoch (UTC midnight for days).
CREATE FUNCTION postbox_period_floor(ts timestamptz, period interval) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT to_timestamp(floor(extract(epoch FROM ts) / extract(epoch FROM period)) * extract(epoch FROM period))
$$;

-- The partitions of a table partitioned by RANGE (event_id), with their bounds (NULL: MINVALUE, or the default).
CREATE FUNCTION postbox_partitions(parent regclass)
    RETURNS TABLE (partition regclass, range_from uuid, range_to uuid, is_default boolean)
    LANGUAGE sql STABLE
AS $$
    SELECT c.oid::regclass,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$FROM \('([0-9a-f-]{36})'\)$r$)::uuid,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$TO \('([0-9a-f-]{36})'\)$r$)::uuid,
           pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = parent
$$;

-- Makes the partitions of the next `ahead` periods that do not exist yet, each after the newest one, and returns
-- how many it made (at most 50 a call: the next call goes on). A new partition is created alone and then attached:
-- ATTACH takes SHARE UPDATE EXCLUSIVE on the parent, where CREATE TABLE … PARTITION OF would take ACCESS EXCLUSIVE
-- and stop every writer. It does lock the default partition (ACCESS EXCLUSIVE: ATTACH scans it for rows of the new
-- range), so statements that read the default wait for the call: the default is kept tiny, the rows of the new
-- range found in it move first under that lock, and every lock is waited for at most 500 ms (SQLSTATE 55P03; the
-- next call tries again). The new partition takes the storage settings of the newest one.
CREATE FUNCTION postbox_premake_partitions(parent regclass, period interval, ahead integer) RETURNS integer
    LANGUAGE plpgsql
AS $$
DECLARE
    newest regclass;
    lo timestamptz;
    hi timestamptz;
    horizon timestamptz := now() + period * ahead;
    made integer := 0;
    child text;
    options text[];
    fallback regclass;
    columns text;
BEGIN
    IF (SELECT c.relkind FROM pg_class c WHERE c.oid = parent) <> 'p' THEN
        RETURN 0;  -- not converted yet (0017 half done): postbox_extend_legacy_bound keeps it writable
    END IF;
    IF extract(epoch FROM period) < 1 THEN
        RAISE EXCEPTION 'partition period % is shorter than a second', period USING ERRCODE = '22023';
    END IF;
    -- Processes premaking at once make each partition once: the second waits, then finds them made.
    PERFORM pg_advisory_xact_lock(hashtext('postbox.partitions'), parent::oid::integer);
    PERFORM set_config('lock_timeout', '500ms', true);
    SELECT p.partition, postbox_uuid_time(p.range_to) INTO newest, lo
    FROM postbox_partitions(parent) p WHERE p.range_to IS NOT NULL
    ORDER BY p.range_to DESC LIMIT 1;
    IF lo IS NULL THEN
        lo := postbox_period_floor(now(), period);
    END IF;
    SELECT p.partition INTO fallback FROM postbox_partitions(parent) p WHERE p.is_default;
    SELECT c.reloptions INTO options FROM pg_class c WHERE c.oid = coalesce(newest, fallback);
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO columns
    FROM pg_attribute a WHERE a.attrelid = parent AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '';
    IF lo < horizon AND fallback IS NOT NULL THEN
        -- Before any write to it: a row committed into the default between the move and the ATTACH would fail it.
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', fallback);
    END IF;
    WHILE lo < horizon AND made < 50 LOOP
        hi := lo + period;
        child := format('%s_p%s', (SELECT c.relname FROM pg_class c WHERE c.oid = parent),
                        to_char(lo AT TIME ZONE 'UTC',
                                CASE WHEN extract(epoch FROM period)::bigint % 86400 = 0 THEN 'YYYYMMDD'
                                     ELSE 'YYYYMMDD"_"HH24MISS' END));
        EXECUTE format('CREATE TABLE %I (LIKE %s INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)',
                       child, parent);
        IF options IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %I SET (%s)', child, array_to_string(options, ', '));
        END IF;
        IF fallback IS NOT NULL THEN
            EXECUTE format('WITH moved AS (DELETE FROM %s WHERE event_id >= %L AND event_id < %L RETURNING *) '
                           'INSERT INTO %I (%s) SELECT %s FROM moved',
                           fallback, postbox_uuid_floor(lo), postbox_uuid_floor(hi), child, columns, columns);
        END IF;
        EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       parent, child, postbox_uuid_floor(lo), postbox_uuid_floor(hi));
        made := made + 1;
        lo := hi;
    END LOOP;
    RETURN made;
END
$$;

-- The bound of the legacy partition: midnight (UTC) two days ahead. From the `bound` step on the table refuses an
-- id at or past it (23514) until the swap. Taken from the clock, not from the newest id: one stray id (not a v7,
-- or a clock far off) would otherwise push it centuries ahead and keep every row in the legacy partition; such a
-- row stops `validate` instead, named by PostgreSQL. A conversion left half done keeps the bound moving ahead
-- (postbox_extend_legacy_bound, called by every process that premakes), so it never stops writers.
CREATE FUNCTION postbox_legacy_bound() RETURNS uuid
    LANGUAGE sql STABLE
AS $$
    SELECT postbox_uuid_floor(postbox_period_floor(now() + interval '2 days', interval '1 day'))
$$;

-- A table whose conversion stopped between `bound` and `swap` (a swap that never got its lock, a migrator that
-- was not run again): when its bound is less than a day away, it is replaced by one two days ahead, added NOT
-- VALID (milliseconds) and validated without blocking writers. Returns whether it moved the bound.
CREATE FUNCTION postbox_extend_legacy_bound(tbl regclass) RETURNS boolean
    LANGUAGE plpgsql
AS $$
DECLARE
    name text := format('%s_legacy_bound', (SELECT c.relname FROM pg_class c WHERE c.oid = tbl));
    bound uuid;
BEGIN
    SELECT substring(pg_get_constraintdef(oid) FROM $r$'([0-9a-f-]{36})'$r$)::uuid INTO bound
    FROM pg_constraint WHERE conrelid = tbl AND conname = name;
    IF bound IS NULL OR postbox_uuid_time(bound) > now() + interval '1 day' THEN
        RETURN false;
    END IF;
    PERFORM set_config('lock_timeout', '500ms', true);
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', tbl, name);
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (event_id < %L::uuid) NOT VALID', tbl, name, postbox_legacy_bound());
    RETURN true;
END
$$;

-- postbox:step bound_outbox
DO $$
BEGIN
    EXECUTE format('ALTER TABLE message_outbox ADD CONSTRAINT message_outbox_legacy_bound CHECK (event_id < %L::uuid) NOT VALID',
                   postbox_legacy_bound());
END
$$;

-- postbox:step validate_outbox no-transaction
ALTER TABLE message_outbox VALIDATE CONSTRAINT message_outbox_legacy_bound;

-- postbox:step swap_outbox
LOCK TABLE message_outbox IN ACCESS EXCLUSIVE MODE;
DO $$
DECLARE
    bound uuid;
    next_seq bigint;
    view_sql text := pg_get_viewdef('message_outbox_state'::regclass);
    empty boolean := NOT EXISTS (SELECT 1 FROM message_outbox);
BEGIN
    SELECT substring(pg_get_constraintdef(oid) FROM $r$'([0-9a-f-]{36})'$r$)::uuid INTO bound
    FROM pg_constraint WHERE conrelid = 'message_outbox'::regclass AND conname = 'message_outbox_legacy_bound';
    IF NOT (SELECT convalidated FROM pg_constraint
            WHERE conrelid = 'message_outbox'::regclass AND conname = 'message_outbox_legacy_bound') THEN
        RAISE EXCEPTION 'message_outbox_legacy_bound was moved on and is not validated yet: run postbox migrate again in a minute'
            USING ERRCODE = '55000';
    END IF;
    SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END INTO next_seq FROM message_outbox_seq_seq;

    DROP TRIGGER message_outbox_key_insert ON message_outbox;
    DROP TRIGGER message_outbox_key_delete ON message_outbox;
    DROP TRIGGER message_outbox_key_truncate ON message_outbox;
    ALTER TABLE message_outbox RENAME TO message_outbox_p_legacy;
    ALTER INDEX message_outbox_pkey RENAME TO message_outbox_p_legacy_pkey;
    ALTER INDEX message_outbox_ready_idx RENAME TO message_outbox_p_legacy_ready_idx;
    ALTER INDEX message_outbox_publishing_idx RENAME TO message_outbox_p_legacy_publishing_idx;
    ALTER INDEX message_outbox_failed_idx RENAME TO message_outbox_p_legacy_failed_idx;
    ALTER INDEX message_outbox_created_brin RENAME TO message_outbox_p_legacy_created_brin;
    ALTER TABLE message_outbox_p_legacy
        RENAME CONSTRAINT message_outbox_aggregate_id_aggregate_version_key TO message_outbox_p_legacy_aggregate_key;
    ALTER TABLE message_outbox_p_legacy ALTER COLUMN seq DROP IDENTITY;

    -- The parent: the legacy table's columns in their order (prepared statements and SELECT * see no change).
    CREATE TABLE message_outbox (LIKE message_outbox_p_legacy INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)
        PARTITION BY RANGE (event_id);
    ALTER TABLE message_outbox DROP CONSTRAINT message_outbox_legacy_bound;
    ALTER TABLE message_outbox ADD PRIMARY KEY (event_id);
    EXECUTE format('ALTER TABLE message_outbox ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (START WITH %s)', next_seq);
    -- The indexes of 0001, on the parent before the legacy table is attached, so that its own are adopted, not rebuilt.
    CREATE INDEX message_outbox_ready_idx ON message_outbox (lane, seq) WHERE status IN ('pending', 'publishing');
    CREATE INDEX message_outbox_publishing_idx ON message_outbox (lane, lease_until) WHERE status = 'publishing';
    CREATE INDEX message_outbox_failed_idx ON message_outbox (created_at) WHERE status = 'failed';
    CREATE INDEX message_outbox_created_brin ON message_outbox USING brin (created_at);
    EXECUTE 'CREATE OR REPLACE VIEW message_outbox_state AS ' || view_sql;

    CREATE TABLE message_outbox_p_default PARTITION OF message_outbox DEFAULT;
    -- The storage settings of 0001, per partition (a partitioned table has no storage); new partitions copy them.
    ALTER TABLE message_outbox_p_default SET (
        fillfactor = 90,
        autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_insert_scale_factor = 0.02,
        autovacuum_vacuum_cost_delay = 0,
        autovacuum_analyze_scale_factor = 0.02
    );
    -- Attached without a scan: the validated bound proves the range. An empty table (a new installation) takes
    -- the ids from before today instead (events older than Postbox here: replays, a new consumer of an old topic).
    IF empty THEN
        bound := postbox_uuid_floor(postbox_period_floor(now(), interval '1 day'));
    END IF;
    EXECUTE format('ALTER TABLE message_outbox ATTACH PARTITION message_outbox_p_legacy FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    ALTER TABLE message_outbox_p_legacy DROP CONSTRAINT message_outbox_legacy_bound;
    PERFORM postbox_premake_partitions('message_outbox', interval '1 day', 7);

    CREATE TRIGGER message_outbox_key_insert AFTER INSERT ON message_outbox
        REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION postbox_outbox_key_insert();
    CREATE TRIGGER message_outbox_key_delete AFTER DELETE ON message_outbox
        REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION postbox_outbox_key_delete();
    CREATE TRIGGER message_outbox_key_truncate AFTER TRUNCATE ON message_outbox
        FOR EACH STATEMENT EXECUTE FUNCTION postbox_outbox_key_truncate();
END
$$;

-- postbox:step bound_inbox
DO $$
BEGIN
    EXECUTE format('ALTER TABLE message_inbox ADD CONSTRAINT message_inbox_legacy_bound CHECK (event_id < %L::uuid) NOT VALID',
                   postbox_legacy_bound());
END
$$;

-- postbox:step validate_inbox no-transaction
ALTER TABLE message_inbox VALIDATE CONSTRAINT message_inbox_legacy_bound;

-- postbox:step swap_inbox
LOCK TABLE message_inbox IN ACCESS EXCLUSIVE MODE;
DO $$
DECLARE
    bound uuid;
    empty boolean := NOT EXISTS (SELECT 1 FROM message_inbox);
BEGIN
    SELECT substring(pg_get_constraintdef(oid) FROM $r$'([0-9a-f-]{36})'$r$)::uuid INTO bound
    FROM pg_constraint WHERE conrelid = 'message_inbox'::regclass AND conname = 'message_inbox_legacy_bound';
    IF NOT (SELECT convalidated FROM pg_constraint
            WHERE conrelid = 'message_inbox'::regclass AND conname = 'message_inbox_legacy_bound') THEN
        RAISE EXCEPTION 'message_inbox_legacy_bound was moved on and is not validated yet: run postbox migrate again in a minute'
            USING ERRCODE = '55000';
    END IF;
    ALTER TABLE message_inbox RENAME TO message_inbox_p_legacy;
    ALTER INDEX message_inbox_pkey RENAME TO message_inbox_p_legacy_pkey;
    ALTER INDEX message_inbox_processed_brin RENAME TO message_inbox_p_legacy_processed_brin;
    CREATE TABLE message_inbox (LIKE message_inbox_p_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
        PARTITION BY RANGE (event_id);
    ALTER TABLE message_inbox DROP CONSTRAINT message_inbox_legacy_bound;
    -- The deduplication key: it holds the partition key, so it is one unique index across all partitions.
    ALTER TABLE message_inbox ADD PRIMARY KEY (consumer_name, event_id);
    CREATE INDEX message_inbox_processed_brin ON message_inbox USING brin (processed_at);
    CREATE TABLE message_inbox_p_default PARTITION OF message_inbox DEFAULT;
    -- Attached without a scan: the validated bound proves the range. An empty table (a new installation) takes
    -- the ids from before today instead (events older than Postbox here: replays, a new consumer of an old topic).
    IF empty THEN
        bound := postbox_uuid_floor(postbox_period_floor(now(), interval '1 day'));
    END IF;
    EXECUTE format('ALTER TABLE message_inbox ATTACH PARTITION message_inbox_p_legacy FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    ALTER TABLE message_inbox_p_legacy DROP CONSTRAINT message_inbox_legacy_bound;
    PERFORM postbox_premake_partitions('message_inbox', interval '1 day', 7);
END
$$;
