import type { Sql } from '@postbox/engine';
import { createKafka } from '@postbox/engine/kafka';
import { kafka, sleep, uniqueName, until, type BenchDatabase } from '../support.ts';
import type { BenchBroker } from '../brokers.ts';
import { spawnConsumer, spawnRelay, type RoleProcess } from './processes.ts';

/**
 * The pipeline as it is deployed: one `postbox relay` and one `postbox consume` process beside the bench process
 * (which plays the business service), so the producer does not share an event loop with the relay's or the
 * consumer's main thread. start() returns once the relay holds the lanes and the consumer's group is stable.
 */
export interface PipelineRoles {
  relay: RoleProcess;
  consumer: RoleProcess;
  consumerName: string;
  /** Events the consumer committed (its inbox rows), read from the database. */
  committed(): Promise<number>;
  stop(): Promise<void>;
}

export async function startRoles(
  db: BenchDatabase,
  o: {
    topic: string;
    partitions: number;
    relayThreads: number;
    consumerThreads: number;
    batch: number;
    label: string;
    /** @defaultValue 'kafka' */
    broker?: BenchBroker;
    /** The consumer's name: RabbitMQ's topic is made with its group's queues. @defaultValue a new one */
    consumerName?: string;
  },
): Promise<PipelineRoles> {
  const broker = o.broker ?? 'kafka';
  const consumerName = o.consumerName ?? uniqueName(`bench-${o.label}`);
  // The consumer first: on RabbitMQ it declares its group's queues, which must be there before anything is sent.
  const consumer = spawnConsumer({
    databaseUrl: db.url,
    topic: o.topic,
    consumer: consumerName,
    threads: o.consumerThreads,
    label: `${o.label} consumer`,
    broker,
    partitions: o.partitions,
  });
  const relay = spawnRelay({
    databaseUrl: db.url,
    topic: o.topic,
    partitions: o.partitions,
    threads: o.relayThreads,
    batch: o.batch,
    label: `${o.label} relay`,
    broker,
  });
  const roles: PipelineRoles = {
    relay,
    consumer,
    consumerName,
    committed: () => inboxCount(db.sql, consumerName),
    stop: async () => {
      await Promise.all([relay.stop(), consumer.stop()]);
    },
  };
  try {
    await until(
      async () => (await ownedLanes(db.sql)) === 16,
      `the ${o.label} relay to take the 16 lanes`,
      90_000,
      200,
    );
    if (broker === 'kafka') await untilGroupStable(`postbox.${consumerName}`, 1);
    else await untilLeasesHeld(db.sql, o.partitions);
  } catch (cause) {
    await roles.stop().catch(() => {});
    throw cause;
  }
  return roles;
}

export async function inboxCount(sql: Sql, consumer: string): Promise<number> {
  const [row] = await sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_inbox WHERE consumer_name = ${consumer}`;
  return row!.n;
}

async function ownedLanes(sql: Sql): Promise<number> {
  const [row] = await sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM relay_lane WHERE owner IS NOT NULL AND lease_until > now()`;
  return row!.n;
}

/** Waits until the (only) consumer of the database holds a lease on every partition (NATS, RabbitMQ). */
async function untilLeasesHeld(sql: Sql, partitions: number): Promise<void> {
  await until(
    async () => {
      const [row] = await sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM consumer_partition_lease WHERE owner IS NOT NULL AND lease_until > now()`;
      return row!.n >= partitions;
    },
    `the consumer to hold the leases of ${partitions} partitions`,
    90_000,
    200,
  );
}

/** Waits until the group has `members` members and is not rebalancing. */
export async function untilGroupStable(groupId: string, members: number): Promise<void> {
  const admin = createKafka(kafka).admin();
  try {
    await admin.connect();
    await until(
      async () => {
        try {
          const { groups } = await admin.describeGroups([groupId]);
          return groups[0]?.state === 'Stable' && groups[0].members.length === members;
        } catch (error) {
          // A broker just started answers "not the correct coordinator" until its offsets topic is led: ask again.
          if ((error as { retriable?: boolean }).retriable === true) return false;
          throw error;
        }
      },
      `consumer group ${groupId} to be stable with ${members} member(s)`,
      90_000,
      250,
    );
    await sleep(500);
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

/** Polls the inbox until the consumer committed `count` events. */
export async function untilCommitted(
  roles: PipelineRoles,
  count: number,
  timeoutMs: number,
  onProgress?: (n: number) => void,
): Promise<void> {
  let n = 0;
  await until(
    async () => {
      n = await roles.committed();
      onProgress?.(n);
      return n >= count;
    },
    `consumer ${roles.consumerName} to commit ${count} events (has ${n})`,
    timeoutMs,
    50,
  );
}
