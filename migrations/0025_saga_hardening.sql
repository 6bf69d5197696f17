-- Sagas: one saga's failing timer must not stop the others, and the saga tables must not grow without end.
--
-- A timer whose transition fails transiently (a lock timeout, a lost connection) is pushed back with backoff
-- (SagaTimerRunner): timer_failures counts the failures since the saga last moved, so the backoff grows, and a
-- saga in backoff is due at its due_at alone (its passed deadline waits for it). Every transition resets it to 0.
ALTER TABLE saga_instance ADD COLUMN timer_failures integer NOT NULL DEFAULT 0;

-- 0012 (saga_participation_step_idx) and 0013 (saga_participation_step_key_idx) both index saga_participation
-- (step_key): every participant write paid for the same index twice. The earlier one stays.
DROP INDEX IF EXISTS saga_participation_step_key_idx;

-- Retention of ended sagas (retention/sagas.ts) deletes their history with them: by saga id, through
-- saga_history_saga_idx; the sagas themselves are found through saga_instance_status_idx (status, updated_at).
-- Ignored replies are kept for the same window, found by when they were recorded.
CREATE INDEX saga_reply_ignored_at_idx ON saga_reply_ignored (at);
