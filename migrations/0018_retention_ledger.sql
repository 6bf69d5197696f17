-- Retention's ledger (issue 23, docs/operations.md "Retention"): what each run did, and where each partition it
-- took out stands. A partition goes detached → archived (its rows exported to a compressed file whose manifest
-- and checksum were verified) → dropped; every step is recorded when done, so a run killed half-way resumes at
-- the partition's state: a detached table is exported again, an archived one dropped.
CREATE TABLE retention_run (
    run_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    trigger text NOT NULL CHECK (trigger IN ('schedule', 'cli')),
    actor text NOT NULL,
    dry_run boolean NOT NULL,
    policy jsonb NOT NULL,
    -- refused: the policy does not fit the broker (an inbox window shorter than a topic's retention); nothing done.
    status text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'finished', 'failed', 'skipped', 'refused')),
    -- What the run found per table: partitions, rows and bytes before and after, candidates and why others are held.
    plan jsonb,
    error text,
    started_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX retention_run_started_idx ON retention_run (started_at);

CREATE TABLE retention_partition (
    table_name text NOT NULL,
    partition text NOT NULL,
    -- The event-id time range it held (range_from NULL: everything before range_to, the legacy partition).
    range_from timestamptz,
    range_to timestamptz NOT NULL,
    state text NOT NULL CHECK (state IN ('detached', 'archived', 'dropped')),
    rows bigint,
    bytes bigint,
    archive_path text,
    manifest jsonb,
    run_id bigint NOT NULL REFERENCES retention_run (run_id),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, partition)
);
