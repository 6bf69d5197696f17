-- The saga definitions processes have run, by type and version, with the hash of their shape (steps, topics, reply
-- types, pivot): a process whose definition changed shape without a new version refuses to start (instances in
-- flight would be driven by steps they were not started with). Written by SagaOrchestrator.register().
CREATE TABLE saga_definition (
    saga_type text NOT NULL,
    version integer NOT NULL,
    shape_hash text NOT NULL,
    steps text[] NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_type, version)
);

-- Counting sagas by status for the control plane and the progress line, and finding the oldest running one.
CREATE INDEX saga_instance_status_idx ON saga_instance (status, updated_at);

-- A sequence number per saga, newest highest: the control plane pages sagas by it (keyset, stable under inserts).
ALTER TABLE saga_instance ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
CREATE UNIQUE INDEX saga_instance_seq_idx ON saga_instance (seq);
