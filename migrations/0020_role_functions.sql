-- What a role that does not own the tables may still do, with the owner's rights (issue 24, docs/security.md):
-- `postbox migrate --roles` creates roles that own nothing, so the two things they do beyond DML run as the owner.
-- - Partitions made ahead by every relay and consumer: ATTACH needs the table's owner. postbox_premake takes only
--   the two Postbox tables' names, so it can make nothing else; EXECUTE is granted per role, not to PUBLIC.
-- - The (aggregate, version) registry kept by the outbox's triggers: a producer needs INSERT on the outbox only,
--   not on the registry its insert maintains.
-- Each runs with search_path fixed to the schema the migrations ran in, so no caller's path can redirect a name.
CREATE FUNCTION postbox_premake(tbl text, period_seconds integer, ahead integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
    IF tbl NOT IN ('message_outbox', 'message_inbox') THEN
        RAISE EXCEPTION 'postbox_premake makes partitions of message_outbox and message_inbox only, not %', tbl
            USING ERRCODE = '22023';
    END IF;
    RETURN postbox_premake_partitions(tbl::regclass, make_interval(secs => period_seconds), ahead);
END
$$;
REVOKE EXECUTE ON FUNCTION postbox_premake(text, integer, integer) FROM PUBLIC;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION postbox_premake(text, integer, integer) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION postbox_outbox_key_insert() SECURITY DEFINER SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION postbox_outbox_key_delete() SECURITY DEFINER SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION postbox_outbox_key_truncate() SECURITY DEFINER SET search_path = %I, pg_temp', current_schema());
END
$$;
