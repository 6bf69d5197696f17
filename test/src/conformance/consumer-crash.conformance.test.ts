import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { appliedSequences, createHandlerTables, TEST_CONSUMER_MODULE } from '../support/consumer.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { writeEvents } from '../support/events.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { stack } from '../support/stack.ts';
import { uniqueName } from './adapters.ts';

// The conformance suite's process case (issue 22), for every broker: a consumer killed (SIGKILL) mid-batch and a
// new one started — what was applied and not yet committed comes again and the inbox absorbs it: every
// aggregate applied 1..n, once, in order. Outbox → `postbox relay` → broker → `postbox consume`, real processes.
const AGGREGATES = 40;
const VERSIONS = 10;

interface Broker {
  name: string;
  setup(): Promise<Record<string, string>>;
  teardown(): Promise<void>;
}

let nats: PrivateStack | null = null;
let rabbitmq: PrivateStack | null = null;
const BROKERS: Broker[] = [
  {
    name: 'kafka',
    setup: async () => ({ KAFKA_BROKERS: stack.KAFKA_BROKERS }),
    teardown: async () => {},
  },
  {
    name: 'nats',
    setup: async () => {
      nats = await startPrivateStack({ nats: true });
      return { POSTBOX_BROKER: 'nats', NATS_URL: nats.nats!.url, KAFKA_BROKERS: '127.0.0.1:1' };
    },
    teardown: async () => {
      await nats?.stop();
    },
  },
  {
    name: 'rabbitmq',
    setup: async () => {
      rabbitmq = await startPrivateStack({ rabbitmq: true });
      return { POSTBOX_BROKER: 'rabbitmq', RABBITMQ_URL: rabbitmq.rabbitmq!.url, KAFKA_BROKERS: '127.0.0.1:1' };
    },
    teardown: async () => {
      await rabbitmq?.stop();
    },
  },
];

for (const broker of BROKERS) {
  describe(`${broker.name}: consumer killed mid-batch`, () => {
    let db: TestDatabase;
    let brokerEnv: Record<string, string>;
    const processes: RoleProcess[] = [];
    before(async () => {
      db = await freshDatabase();
      brokerEnv = await broker.setup();
      // Slow enough per event that the kill lands in the middle of the work.
      await createHandlerTables(db.sql, 5);
    });
    after(async () => {
      for (const p of processes) if (p.child.exitCode === null && p.child.signalCode === null) p.kill('SIGKILL');
      await Promise.all(processes.map((p) => p.exited));
      await broker.teardown();
      await db.drop();
    });

    test('the redelivered records are absorbed by the inbox: every aggregate applied 1..n once, in order', async () => {
      const topic = uniqueName('conf-crash');
      const env = {
        DATABASE_URL: db.url,
        ...brokerEnv,
        POSTBOX_TOPICS: `${topic}:3`,
        TEST_TOPIC: topic,
        TEST_CONSUMER: 'crash',
        LOG_LEVEL: 'warn',
        // The killed member's partitions move after this (it never says goodbye).
        POSTBOX_KAFKA_SESSION_TIMEOUT_MS: '8000',
        POSTBOX_PARTITION_LEASE_MS: '6000',
      };
      const spawn = (args: string[]) => {
        const p = spawnPostbox(args, env);
        processes.push(p);
        return p;
      };
      const written = await writeEvents(db.sql, topic, AGGREGATES, VERSIONS, 500, 'c');
      // The group first, then the relay: on RabbitMQ a group's queues must be there before anything is published.
      const first = spawn(['consume', TEST_CONSUMER_MODULE]);
      await waitFor('the consumer up', async () => first.output().includes('postbox consume:'), 90_000, 50);
      spawn(['relay']);
      const applied = async () =>
        (await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM test_applied WHERE consumer = 'crash'`)[0]!.n;
      await waitFor('a part applied', async () => (await applied()) >= 60, 90_000, 50);
      first.kill('SIGKILL');
      assert.equal(await first.exited, null, 'killed, not stopped');
      assert.ok((await applied()) < written, 'killed mid-way');
      const second = spawn(['consume', TEST_CONSUMER_MODULE]);
      await waitFor('everything applied', async () => (await applied()) >= written, 120_000);
      second.kill('SIGTERM');
      assert.equal(await second.exited, 0, second.output().slice(-2000));
      const sequences = await appliedSequences(db.sql, 'crash');
      assert.equal(sequences.size, AGGREGATES);
      const expected = Array.from({ length: VERSIONS }, (_, i) => i + 1);
      for (const [aggregate, versions] of sequences)
        assert.deepEqual(versions, expected, `${aggregate}: once each, in order`);
    });
  });
}
