-- postbox:expand replaces a function's body; its signature, owner and grants stay
--
-- postbox_premake (0020) runs with the owner's rights for the relay and consumer roles: it now refuses what no
-- configuration asks for (POSTBOX_PARTITION_AHEAD is 1…1000, a period at least a second), so a narrow role cannot
-- have it make partitions without bound. Periods are capped at a year.
CREATE OR REPLACE FUNCTION postbox_premake(tbl text, period_seconds integer, ahead integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
    IF tbl NOT IN ('message_outbox', 'message_inbox') THEN
        RAISE EXCEPTION 'postbox_premake makes partitions of message_outbox and message_inbox only, not %', tbl
            USING ERRCODE = '22023';
    END IF;
    IF ahead IS NULL OR ahead < 1 OR ahead > 1000 THEN
        RAISE EXCEPTION 'postbox_premake makes 1 to 1000 partitions ahead, not %', ahead USING ERRCODE = '22023';
    END IF;
    IF period_seconds IS NULL OR period_seconds < 1 OR period_seconds > 366 * 86400 THEN
        RAISE EXCEPTION 'postbox_premake takes a period of 1 s to 366 days, not % s', period_seconds
            USING ERRCODE = '22023';
    END IF;
    RETURN postbox_premake_partitions(tbl::regclass, make_interval(secs => period_seconds), ahead);
END
$$;

-- CREATE OR REPLACE resets the function's settings: its search path is fixed again to the schema the
-- migrations run in.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION postbox_premake(text, integer, integer) SET search_path = %I, pg_temp', current_schema());
END
$$;
