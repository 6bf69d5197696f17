import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { AssignerProtocol, Kafka, logLevel, type Consumer as KafkaConsumer, type PartitionAssigner } from 'kafkajs';
import type { SubscriberCrash } from '@postbox/engine/kafka';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import {
  appliedSequences,
  ceRecord,
  createHandlerTables,
  produce,
  RECORDING_HANDLER,
  startTestConsumer,
} from '../support/consumer.ts';
import { stack } from '../support/stack.ts';

// kafkajs restarts a crashed group member only when it deems the error retriable; after any other crash (a join
// the coordinator refuses, an unexpected error) the member stays disconnected while the process lives on, and
// nothing consumes again. Made deterministic here: an interloper holds the group with a partition assignor of
// another name, so the coordinator refuses our member's join (INCONSISTENT_GROUP_PROTOCOL, not retriable for
// kafkajs). Once the interloper leaves, the subscriber's replacement member must join and consume everything.
let db: TestDatabase;
const topic = uniqueTopic('member-crash');
const name = `member-crash-${topic.slice(-6)}`;
const AGGREGATES = 20;
const VERSIONS = 3;
let interloper: KafkaConsumer | null = null;

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 2);
  await createHandlerTables(db.sql);
});

after(async () => {
  await interloper?.disconnect().catch(() => {});
  await db.drop();
});

/** A group member whose only assignor is named "interloper": it takes every partition and reads nothing. */
const interloperAssigner: PartitionAssigner = () => ({
  name: 'interloper',
  version: 1,
  async assign({ members, topics }) {
    const [first, ...rest] = members;
    return [
      {
        memberId: first!.memberId,
        memberAssignment: AssignerProtocol.MemberAssignment.encode({
          version: 1,
          assignment: Object.fromEntries(topics.map((t) => [t, [0, 1]])),
          userData: Buffer.alloc(0),
        }),
      },
      ...rest.map((m) => ({
        memberId: m.memberId,
        memberAssignment: AssignerProtocol.MemberAssignment.encode({
          version: 1,
          assignment: {},
          userData: Buffer.alloc(0),
        }),
      })),
    ];
  },
  protocol({ topics }) {
    return {
      name: 'interloper',
      metadata: AssignerProtocol.MemberMetadata.encode({ version: 1, topics, userData: Buffer.alloc(0) }),
    };
  },
});

test('a member kafkajs gives up on is replaced: the consumer joins once it can and applies everything, once, in order', {
  timeout: 120_000,
}, async () => {
  const kafka = new Kafka({
    clientId: 'postbox-test-interloper',
    brokers: stack.KAFKA_BROKERS.split(','),
    logLevel: logLevel.NOTHING,
  });
  interloper = kafka.consumer({
    groupId: `postbox.${name}`,
    partitionAssigners: [interloperAssigner],
    sessionTimeout: 10_000,
  });
  const joined = new Promise<void>((resolve) => interloper!.on(interloper!.events.GROUP_JOIN, () => resolve()));
  await interloper.connect();
  await interloper.subscribe({ topic, fromBeginning: true });
  await interloper.run({ autoCommit: false, eachBatchAutoResolve: false, eachBatch: async () => {} });
  await joined;

  const records = [];
  for (let v = 1; v <= VERSIONS; v++)
    for (let a = 0; a < AGGREGATES; a++) records.push(ceRecord({ aggregate_id: `agg-${a}`, version: v }));
  await produce(topic, records);

  const crashes: SubscriberCrash[] = [];
  const consumer = await startTestConsumer(
    db.url,
    { name, topics: [topic], handler: RECORDING_HANDLER },
    { subscriber: { onCrash: (c) => crashes.push(c), sessionTimeoutMs: 10_000 } },
  );
  try {
    await waitFor('the refused member reported as replaced', async () => crashes.some((c) => c.replaced), 30_000);
    assert.equal(consumer.stats().applied, 0, 'the interloper holds the group: nothing consumed yet');
    await interloper.disconnect();
    interloper = null;
    await waitFor(
      'every event applied after the interloper left',
      async () => consumer.stats().applied === AGGREGATES * VERSIONS,
      60_000,
    ).catch((e: unknown) => {
      throw new Error(
        `${(e as Error).message}: ${JSON.stringify(consumer.stats())}; crashes: ${crashes.map((c) => `${c.error.name}: ${c.error.message} (replaced ${c.replaced})`).join(' | ')}`,
      );
    });
  } finally {
    await consumer.stop();
  }
  const refused = crashes.find((c) => c.replaced)!;
  assert.match(
    `${refused.error.message} ${String((refused.error.cause as Error | undefined)?.message)}`,
    /protocol/i,
    'the crash is the refused join',
  );
  const sequences = await appliedSequences(db.sql, name);
  assert.equal(sequences.size, AGGREGATES);
  for (const [aggregate, versions] of sequences)
    assert.deepEqual(versions, [1, 2, 3], `${aggregate} applied once per version, in order`);
});
