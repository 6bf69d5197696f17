-- An event may carry a deadline (a command that is moot after it): past it, a retry ends as 'expired' (DESIGN §7).
ALTER TABLE message_outbox ADD COLUMN deadline timestamptz;
