-- postbox:online
-- postbox:expand adds a column with a default, drops a duplicate index and builds one, none while writers wait
--
-- Sagas: one saga's failing timer must not stop the others, and the saga tables must not grow without end.

-- postbox:step timer_failures
-- A timer whose transition fails transiently (a lock timeout, a lost connection, a deploy's missing grant) is
-- pushed back with backoff (SagaTimerRunner): timer_failures counts the failures since the saga last moved, so the
-- backoff grows, and a saga in backoff is due at its due_at alone (its passed deadline waits for it). Every
-- transition resets it to 0. (A transition by a process of the previous version leaves it as it was: that saga
-- waits out its current backoff once more, then goes on.)
ALTER TABLE saga_instance ADD COLUMN IF NOT EXISTS timer_failures integer NOT NULL DEFAULT 0;

-- postbox:step duplicate_index no-transaction
-- 0012 (saga_participation_step_idx) and 0013 (saga_participation_step_key_idx) both index saga_participation
-- (step_key): every participant write paid for the same index twice. The earlier one stays; the drop waits for
-- no writer.
DROP INDEX CONCURRENTLY IF EXISTS saga_participation_step_key_idx;

-- postbox:step ignored_at_index no-transaction
-- Retention of ended sagas (retention/sagas.ts) deletes their history with them: by saga id, through
-- saga_history_saga_idx; the sagas themselves are found through saga_instance_status_idx (status, updated_at).
-- Ignored replies are kept for the same window, found by when they were recorded. Built while writes go on.
CREATE INDEX CONCURRENTLY IF NOT EXISTS saga_reply_ignored_at_idx ON saga_reply_ignored (at);

-- postbox:step ignored_at_index_valid
-- A concurrent build that was interrupted leaves an invalid index, which IF NOT EXISTS then skips: say so.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('saga_reply_ignored_at_idx') AND NOT indisvalid) THEN
        RAISE EXCEPTION 'index saga_reply_ignored_at_idx was left invalid by an interrupted build: run DROP INDEX CONCURRENTLY saga_reply_ignored_at_idx; then postbox migrate again';
    END IF;
END
$$;
