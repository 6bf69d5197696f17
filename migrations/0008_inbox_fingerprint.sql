-- What each event a consumer took in looked like (engine envelope/fingerprint.ts: a digest of its value, type,
-- schema version, subject, aggregate version and key). A redelivery with the same fingerprint is a duplicate,
-- absorbed; the same event_id with another fingerprint is a conflict — a producer reused an id for different
-- content — and goes to the failure store (error_code event_id_conflict) instead of being silently dropped.
-- NULL on rows written before this column, or by an operator's skip: those compare as duplicates.
ALTER TABLE message_inbox ADD COLUMN fingerprint bytea;
