-- The reconciliation check saga-step-mismatch (and `postbox sagas show`) look a step's participant record up by
-- its step key alone: the saga knows its step names, not which participant answered. The primary key leads with
-- the participant, so without this index each saga's lookup read the whole table (found by
-- `npm run bench -- reconcile` over 1M sagas).
CREATE INDEX saga_participation_step_key_idx ON saga_participation (step_key);
