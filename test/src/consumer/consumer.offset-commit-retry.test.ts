import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { BrokerError, defineConsumer } from '@postbox/engine';
import { KafkaSubscriber } from '@postbox/engine/kafka';
import {
  Consumer,
  inlineConsumeExecutor,
  type Subscriber,
  type SubscriberSink,
  type TopicPartition,
} from '@postbox/engine/runtime';
import { ceRecord, committedOffsets, createHandlerTables, produce, RECORDING_HANDLER } from '../support/consumer.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// An offset commit that fails when the consumer has nothing more to do (its last events settled, no new record
// on the way) is retried by the consumer itself, with backoff, until it goes through: the group's committed
// offset reaches the end of the partition without another event arriving to carry it. Without the retry the
// offset stays behind until the next event, and a restart (or a rebalance) delivers the tail again.
let db: TestDatabase;
const topic = uniqueTopic('commit-retry');
const EVENTS = 20;

/** The real Kafka subscriber, except that the commit carrying the partition's end offset fails once. */
class CommitFailsOnceAtEnd implements Subscriber {
  readonly #inner: Subscriber;
  readonly #end: string;
  failed = 0;
  constructor(inner: Subscriber, end: number) {
    this.#inner = inner;
    this.#end = String(end);
  }
  start(sink: SubscriberSink): Promise<void> {
    return this.#inner.start(sink);
  }
  async commit(offsets: Array<TopicPartition & { offset: string }>): Promise<void> {
    if (this.failed === 0 && offsets.some((o) => o.offset === this.#end)) {
      this.failed++;
      throw new BrokerError('kafka_request_timeout', 'transient', 'offset commit timed out (injected)');
    }
    return this.#inner.commit(offsets);
  }
  pause(partitions: TopicPartition[]): void {
    this.#inner.pause(partitions);
  }
  resume(partitions: TopicPartition[]): void {
    this.#inner.resume(partitions);
  }
  lag(): ReturnType<Subscriber['lag']> {
    return this.#inner.lag();
  }
  close(): Promise<void> {
    return this.#inner.close();
  }
}

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 1);
  await createHandlerTables(db.sql);
});
after(async () => {
  await db?.drop();
});

test('an offset commit that fails while the consumer is idle is retried: the committed offset reaches the end with no new event', async () => {
  const definition = defineConsumer({ name: 'commit-retry', topics: [topic], handler: RECORDING_HANDLER });
  const subscriber = new CommitFailsOnceAtEnd(
    new KafkaSubscriber({
      brokers: stack.KAFKA_BROKERS.split(','),
      clientId: 'postbox-test-consumer',
      groupId: definition.groupId,
      topics: definition.topics,
      fromBeginning: definition.fromBeginning,
    }),
    EVENTS,
  );
  const consumer = new Consumer({
    definition,
    subscriber,
    executor: inlineConsumeExecutor(definition, db.url),
    lagIntervalMs: 0,
  });
  await consumer.start();
  try {
    await produce(
      topic,
      Array.from({ length: EVENTS }, (_, i) =>
        ceRecord({ aggregate_id: `a-${i % 4}`, version: Math.floor(i / 4) + 1 }),
      ),
    );
    await waitFor('every event applied', async () => {
      const [row] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM test_applied`;
      return row!.n === EVENTS;
    });
    await waitFor('the commit of the end offset to fail', async () => subscriber.failed === 1);
    // Nothing else is produced: only the consumer's own retry can move the committed offset now.
    await waitFor(
      'the committed offset to reach the end of the partition',
      async () => (await committedOffsets(definition.groupId, topic)).get(0) === String(EVENTS),
      30_000,
    );
    assert.equal((await committedOffsets(definition.groupId, topic)).get(0), String(EVENTS));
    assert.equal(subscriber.failed, 1);
  } finally {
    await consumer.stop();
  }
});
