-- Orchestrated sagas (docs/design.md §8): one row per instance holding its state machine (saga/state.ts). Every
-- transition is one transaction: the reply's inbox row, a compare-and-set of this row by its version, the next
-- command in the outbox and the history line. A business key starts one saga per type, however often it is asked.
CREATE TABLE saga_instance (
    saga_id uuid PRIMARY KEY,
    saga_type text NOT NULL,
    definition_version integer NOT NULL,
    business_key text NOT NULL,
    status text NOT NULL CHECK (status IN ('running', 'resolving', 'compensating', 'completed', 'compensated',
                                           'needs_attention', 'closed_manually')),
    step integer NOT NULL,
    direction text NOT NULL CHECK (direction IN ('forward', 'query', 'compensate')),
    attempt integer NOT NULL,
    -- Bumped by every transition: the compare-and-set key, the outbox version of the transition's command, and the
    -- fence of timers armed before it.
    version bigint NOT NULL,
    data jsonb NOT NULL,
    steps text[] NOT NULL,
    -- Commands sent to each step: the version of the step's next command on its own aggregate.
    sends integer[] NOT NULL,
    pivot_passed boolean NOT NULL DEFAULT false,
    attention_reason text,
    -- When the command out now counts as unanswered, and the saga's own deadline.
    due_at timestamptz,
    deadline_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (saga_type, business_key)
);

-- What the timer runner and operators look for: unfinished sagas by due time and deadline, frozen ones by age.
CREATE INDEX saga_instance_due_idx ON saga_instance (due_at)
    WHERE status IN ('running', 'resolving', 'compensating');
CREATE INDEX saga_instance_deadline_idx ON saga_instance (deadline_at)
    WHERE status IN ('running', 'resolving', 'compensating') AND deadline_at IS NOT NULL;
CREATE INDEX saga_instance_attention_idx ON saga_instance (updated_at) WHERE status = 'needs_attention';

-- Every transition of every saga: from, to, step, cause, actor. An operator's reading of what happened.
CREATE TABLE saga_history (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    saga_id uuid NOT NULL REFERENCES saga_instance (saga_id),
    version bigint NOT NULL,
    from_status text,
    to_status text NOT NULL,
    step text,
    direction text,
    cause text NOT NULL,
    actor text NOT NULL DEFAULT 'postbox',
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX saga_history_saga_idx ON saga_history (saga_id, id);

-- Replies that changed nothing — late, repeated, for another step or attempt, for no known saga, malformed —
-- kept for the operator and never applied.
CREATE TABLE saga_reply_ignored (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id uuid NOT NULL,
    saga_id text,
    reply_type text NOT NULL,
    step text,
    direction text,
    attempt integer,
    reason text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);

-- A participant's record per saga step (participant()): applied, compensated, or fenced (asked about or undone
-- before it ran, so a late command is refused). Keyed by the step's idempotency key (saga:step:direction-free).
CREATE TABLE saga_participation (
    participant text NOT NULL,
    step_key text NOT NULL,
    status text NOT NULL CHECK (status IN ('applied', 'compensated', 'fenced')),
    result jsonb,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (participant, step_key)
);
