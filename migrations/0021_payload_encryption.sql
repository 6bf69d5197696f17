-- postbox:expand new nullable columns; a process of the previous version writes and reads clear rows as before
-- (turn POSTBOX_PAYLOAD_KEYS on once every consumer and API process runs this version).
--
-- Payload encryption at rest (seed §17): what the failure store and the retry ledger keep of an event — the
-- payload, its headers and envelope; the stored broker record — may be sealed with AES-256-GCM. `sealed` holds
-- the ciphertext, `key_id` the ring key that sealed it (rotation re-seals row by row under the first key). A
-- sealed row keeps none of those fields in clear. The checks are NOT VALID: every existing row is clear and
-- satisfies them, so no scan under the ALTER's lock; they hold for every row written from now on.

ALTER TABLE message_failure ADD COLUMN key_id text, ADD COLUMN sealed bytea;
ALTER TABLE message_failure ADD CONSTRAINT message_failure_sealed_alone
    CHECK (sealed IS NULL OR (key_id IS NOT NULL AND payload IS NULL AND headers IS NULL AND envelope IS NULL)) NOT VALID;

ALTER TABLE message_retry ADD COLUMN key_id text, ADD COLUMN sealed bytea;
ALTER TABLE message_retry ALTER COLUMN record DROP NOT NULL;
ALTER TABLE message_retry ADD CONSTRAINT message_retry_record_or_sealed
    CHECK ((sealed IS NULL) = (record IS NOT NULL) AND (sealed IS NULL OR key_id IS NOT NULL)) NOT VALID;
