-- Reconciliation (docs/design.md §8, docs/reconciliation.md): named checks compare the business source of truth,
-- the outbox, the consumers, the retry ledger and the sagas, and record what does not hold as findings; repairs
-- go through Postbox's own idempotent commands (re-emit, republish, re-arm, saga actions), dry run first.

-- One run of one check (mode check), or one repair pass over a check's findings (dry_run / execute). At most one
-- run of a check at a time across processes (an advisory lock per check); a run that found the lock taken is
-- recorded as skipped.
CREATE TABLE reconciliation_run (
    run_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    check_name text NOT NULL,
    mode text NOT NULL CHECK (mode IN ('check', 'dry_run', 'execute')),
    trigger text NOT NULL CHECK (trigger IN ('scheduled', 'on_demand')),
    actor text NOT NULL,
    reason text,
    status text NOT NULL CHECK (status IN ('running', 'finished', 'stopped', 'failed', 'skipped')),
    -- check: scanned, found, opened, reopened, closed; repair: planned, repaired, would_repair, stale, manual,
    -- failed, and why a repair pass stopped early.
    counts jsonb NOT NULL DEFAULT '{}',
    error text,
    started_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX reconciliation_run_check_idx ON reconciliation_run (check_name, run_id);

-- What a check found, one row per (check, business key): a re-run updates the row instead of adding one, and a
-- run that no longer observes it closes it (resolved). expected / observed say what should hold and what was
-- seen, as JSON; repair is the last repair taken or refused (action, actor, run, audit id, error).
--   open ──repair──▶ repaired          open/manual ──not observed by a full run──▶ resolved
--   open ──no automatic repair / refused──▶ manual         any ──operator──▶ ignored (stays ignored)
--   repaired/resolved ──observed again──▶ open (the repair did not take)
CREATE TABLE reconciliation_finding (
    finding_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    check_name text NOT NULL,
    business_key text NOT NULL,
    kind text NOT NULL,
    expected jsonb NOT NULL,
    observed jsonb NOT NULL,
    status text NOT NULL CHECK (status IN ('open', 'repaired', 'resolved', 'ignored', 'manual')),
    repair jsonb,
    first_run_id bigint NOT NULL REFERENCES reconciliation_run (run_id),
    last_run_id bigint NOT NULL REFERENCES reconciliation_run (run_id),
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    closed_at timestamptz,
    UNIQUE (check_name, business_key)
);
-- What repairs and the closing step read: a check's findings still needing something, in id order (keyset).
CREATE INDEX reconciliation_finding_live_idx ON reconciliation_finding (check_name, finding_id)
    WHERE status IN ('open', 'manual');
CREATE INDEX reconciliation_finding_status_idx ON reconciliation_finding (status, last_seen_at);

-- saga-step-mismatch asks a participant's record by the step's key alone (any participant of this database).
CREATE INDEX saga_participation_step_idx ON saga_participation (step_key);
