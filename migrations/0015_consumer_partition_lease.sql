-- Partition ownership for consumer groups on brokers without a group coordinator that fits Postbox (NATS JetStream
-- on 2.9: every client of a durable pull consumer gets messages; RabbitMQ: single-active-consumer is per queue
-- only). One row per (group, topic, partition): the member holding an unexpired lease is the only one reading the
-- partition, so its events reach the inbox in order. Members announce themselves; each takes a fair share
-- (partitions / live members) and renews it every third of the lease, as the relay does with its lanes.
CREATE TABLE consumer_member (
    group_id text NOT NULL,
    owner text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, owner)
);

CREATE TABLE consumer_partition_lease (
    group_id text NOT NULL,
    topic text NOT NULL,
    partition integer NOT NULL CHECK (partition >= 0),
    owner text,
    lease_until timestamptz,
    owned_since timestamptz,
    PRIMARY KEY (group_id, topic, partition)
);
