-- The default partition swept (issue 23, ADR 0009): ids outside every range land in `<table>_p_default` — an event
-- replayed with an id from before the oldest partition (retention dropped its day), or a producer's clock far
-- behind. Retention never drops the default, so such rows would stay for ever and every new partition's ATTACH
-- would scan them. Each retention run first gives them a partition of their own: for each period (the oldest
-- range's length) that holds default rows, lies wholly before the cut and overlaps no range, a partition is made
-- and the rows move into it, as postbox_premake_partitions does ahead. The next steps of the run then archive and
-- drop it like any partition past its window (its holds — unpublished, recent — still apply).

-- Returns how many partitions it made (at most 50 a call: the next run goes on). Locks as premake does: the
-- partitions' advisory lock, ACCESS EXCLUSIVE on the default for the call, 500 ms lock timeout (SQLSTATE 55P03).
CREATE FUNCTION postbox_sweep_default(parent regclass, older_than timestamptz) RETURNS integer
    LANGUAGE plpgsql
AS $$
DECLARE
    fallback regclass;
    oldest regclass;
    period interval;
    lo timestamptz;
    hi timestamptz;
    made integer := 0;
    child text;
    options text[];
    columns text;
    relname text := (SELECT c.relname FROM pg_class c WHERE c.oid = parent);
BEGIN
    IF (SELECT c.relkind FROM pg_class c WHERE c.oid = parent) <> 'p' THEN
        RETURN 0;
    END IF;
    SELECT p.partition INTO fallback FROM postbox_partitions(parent) p WHERE p.is_default;
    IF fallback IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('postbox.partitions'), parent::oid::integer);
    PERFORM set_config('lock_timeout', '500ms', true);
    SELECT p.partition, postbox_uuid_time(p.range_to) - postbox_uuid_time(p.range_from) INTO oldest, period
    FROM postbox_partitions(parent) p WHERE p.range_from IS NOT NULL AND p.range_to IS NOT NULL
    ORDER BY p.range_from LIMIT 1;
    period := coalesce(period, interval '1 day');
    SELECT c.reloptions INTO options FROM pg_class c WHERE c.oid = coalesce(oldest, fallback);
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO columns
    FROM pg_attribute a WHERE a.attrelid = parent AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '';
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', fallback);
    FOR lo IN EXECUTE format(
        'SELECT DISTINCT postbox_period_floor(postbox_uuid_time(event_id), %L) FROM %s WHERE event_id < %L ORDER BY 1 LIMIT 50',
        period, fallback, postbox_uuid_floor(older_than))
    LOOP
        hi := lo + period;
        CONTINUE WHEN hi > older_than;
        -- A range made with another period may cover part of it: those rows wait (they are in no range's way).
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM postbox_partitions(parent) p
            WHERE NOT p.is_default
              AND (p.range_from IS NULL OR p.range_from < postbox_uuid_floor(hi))
              AND p.range_to > postbox_uuid_floor(lo));
        child := format('%s_p%s', relname,
                        to_char(lo AT TIME ZONE 'UTC',
                                CASE WHEN extract(epoch FROM period)::bigint % 86400 = 0 THEN 'YYYYMMDD'
                                     ELSE 'YYYYMMDD"_"HH24MISS' END));
        -- A table of that name left detached by an earlier run is retention's to finish, not to reuse.
        CONTINUE WHEN to_regclass(quote_ident(child)) IS NOT NULL;
        EXECUTE format('CREATE TABLE %I (LIKE %s INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)',
                       child, parent);
        IF options IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %I SET (%s)', child, array_to_string(options, ', '));
        END IF;
        EXECUTE format('WITH moved AS (DELETE FROM %s WHERE event_id >= %L AND event_id < %L RETURNING *) '
                       'INSERT INTO %I (%s) SELECT %s FROM moved',
                       fallback, postbox_uuid_floor(lo), postbox_uuid_floor(hi), child, columns, columns);
        EXECUTE format('ALTER TABLE %s ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       parent, child, postbox_uuid_floor(lo), postbox_uuid_floor(hi));
        made := made + 1;
    END LOOP;
    RETURN made;
END
$$;
