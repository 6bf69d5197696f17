-- An event may carry CloudEvents extension attributes (a saga's command: sagaid, sagastep, direction,
-- idempotencykey, replyto): a JSON object of name → string, validated at enqueue (engine envelope/extensions.ts).
-- They are kept with the row, not folded into the payload, so every re-send of it (relay retry, republish, gap
-- back-fill) sends the same `ce_<name>` headers and the payload stays the event's data byte for byte.
-- NULL: the event has none (and every row written before this column).
ALTER TABLE message_outbox ADD COLUMN extensions jsonb;
