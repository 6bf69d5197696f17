-- postbox:expand revokes EXECUTE only on trigger functions (a firing trigger checks no privilege), keeps the 3-argument postbox_premake callable by the roles that had it, and adds the 2-argument one
--
-- The functions that run with the owner's rights (0020) are a boundary, and each now holds it on its own (issue 45):
-- - The key registry's trigger functions were executable by PUBLIC. Creating a trigger needs only EXECUTE on its
--   function, and any role may create a temp table: an AFTER TRUNCATE trigger on it calling
--   postbox_outbox_key_truncate() wiped the (aggregate, version) registry, the insert and delete ones planted or
--   removed chosen keys. EXECUTE is revoked from PUBLIC, and each function refuses to run for any table but
--   message_outbox (TG_RELID), so not even the owner can point it elsewhere.
-- - postbox_premake let its caller choose the period (up to a year): a narrow role could make ~1000 year-long
--   partitions, leaving retention nothing to drop and every claim probing them all. The period is now the
--   table's own, read from its newest bounded partition (a day when it has none yet: 0017's first period), and
--   a narrow role makes at most 100 of them and none past 92 days; only the owner, who may call
--   postbox_premake_partitions, chooses another period or horizon. The 3-argument form stays for processes
--   of the previous version during a rolling upgrade and ignores the period it is given.

CREATE OR REPLACE FUNCTION postbox_outbox_key_insert() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
    IF TG_RELID IS DISTINCT FROM 'message_outbox'::regclass::oid THEN
        RAISE EXCEPTION 'postbox_outbox_key_insert keeps the key registry of message_outbox only, not of %',
            TG_RELID::regclass USING ERRCODE = '42501';
    END IF;
    INSERT INTO message_outbox_key (aggregate_id, aggregate_version, event_id)
    SELECT aggregate_id, aggregate_version, event_id FROM new_rows;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION postbox_outbox_key_delete() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
    IF TG_RELID IS DISTINCT FROM 'message_outbox'::regclass::oid THEN
        RAISE EXCEPTION 'postbox_outbox_key_delete keeps the key registry of message_outbox only, not of %',
            TG_RELID::regclass USING ERRCODE = '42501';
    END IF;
    DELETE FROM message_outbox_key k USING old_rows o
    WHERE k.aggregate_id = o.aggregate_id AND k.aggregate_version = o.aggregate_version AND k.event_id = o.event_id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION postbox_outbox_key_truncate() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
    IF TG_RELID IS DISTINCT FROM 'message_outbox'::regclass::oid THEN
        RAISE EXCEPTION 'postbox_outbox_key_truncate keeps the key registry of message_outbox only, not of %',
            TG_RELID::regclass USING ERRCODE = '42501';
    END IF;
    TRUNCATE message_outbox_key;
    RETURN NULL;
END
$$;

REVOKE EXECUTE ON FUNCTION postbox_outbox_key_insert() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION postbox_outbox_key_delete() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION postbox_outbox_key_truncate() FROM PUBLIC;

-- The period of a table's partitions: the width of its newest bounded one, a day when there is none yet — in
-- seconds: a difference of timestamps comes back in days, and a day added to a timestamp follows the session's
-- time zone across a DST change, which a caller could choose (SET TimeZone) to make 23 or 25 h partitions.
CREATE FUNCTION postbox_partition_period(parent regclass) RETURNS interval
    LANGUAGE sql STABLE
AS $$
    SELECT make_interval(secs => coalesce(
        (SELECT extract(epoch FROM postbox_uuid_time(p.range_to)) - extract(epoch FROM postbox_uuid_time(p.range_from))
         FROM postbox_partitions(parent) p
         WHERE p.range_from IS NOT NULL AND p.range_to IS NOT NULL
         ORDER BY p.range_to DESC LIMIT 1),
        86400))
$$;

CREATE FUNCTION postbox_premake(tbl text, ahead integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
    period interval;
BEGIN
    IF tbl NOT IN ('message_outbox', 'message_inbox') THEN
        RAISE EXCEPTION 'postbox_premake makes partitions of message_outbox and message_inbox only, not %', tbl
            USING ERRCODE = '22023';
    END IF;
    IF ahead IS NULL OR ahead < 1 OR ahead > 1000 THEN
        RAISE EXCEPTION 'postbox_premake makes 1 to 1000 partitions ahead, not %', ahead USING ERRCODE = '22023';
    END IF;
    period := postbox_partition_period(tbl::regclass);
    -- A narrow role makes at most 100 partitions ahead, and none past 92 days from now: more is a configuration
    -- no retention window needs, and each one is a partition every claim on the table plans for.
    RETURN postbox_premake_partitions(
        tbl::regclass, period,
        least(ahead, 100, greatest(1, floor(extract(epoch FROM interval '92 days') / extract(epoch FROM period))::integer)));
END
$$;
REVOKE EXECUTE ON FUNCTION postbox_premake(text, integer) FROM PUBLIC;

-- The previous version's call: no longer the owner's (SECURITY INVOKER), it reaches the 2-argument function with
-- the caller's own EXECUTE on it, given here to every role that could call this one.
CREATE OR REPLACE FUNCTION postbox_premake(tbl text, period_seconds integer, ahead integer) RETURNS integer
    LANGUAGE plpgsql SECURITY INVOKER
AS $$
BEGIN
    RETURN postbox_premake(tbl, ahead);
END
$$;

DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT pg_get_userbyid(a.grantee) FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'postbox_premake(text, integer, integer)'::regprocedure
          AND a.privilege_type = 'EXECUTE' AND a.grantee NOT IN (0, p.proowner)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION postbox_premake(text, integer) TO %I', grantee);
    END LOOP;
END
$$;

-- CREATE OR REPLACE resets a function's settings: each search path is fixed again to the schema the migrations
-- run in, pg_temp last so that no temp table can stand in for a Postbox one.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION postbox_outbox_key_insert() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION postbox_outbox_key_delete() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION postbox_outbox_key_truncate() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION postbox_premake(text, integer) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION postbox_premake(text, integer, integer) SET search_path = %I, pg_temp', current_schema());
END
$$;
