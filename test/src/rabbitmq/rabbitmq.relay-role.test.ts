import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { AMQPClient } from '@cloudamqp/amqp-client';
import { newEventId } from '@postbox/engine';
import { partitionForKey } from '@postbox/engine/nats';
import { ensureExchanges, queueName, RabbitPublisher } from '@postbox/engine/rabbitmq';
import { registerConsumer } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { writeEvents } from '../support/events.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, type RoleProcess } from '../support/processes.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { drainQueue } from '../support/rabbitmq.ts';
import { allPublished } from '../support/relay.ts';

// RabbitMQ's publisher (issue 22) against a private node: `postbox relay` with POSTBOX_BROKER=rabbitmq publishes
// outbox rows with confirms to the topic's exchange, routed by partition to a group's quorum queues; a message no
// queue takes fails for good (never "confirmed").
let stack: PrivateStack;
let db: TestDatabase;
let relay: RoleProcess | null = null;

before(async () => {
  [stack, db] = await Promise.all([startPrivateStack({ rabbitmq: true }), freshDatabase()]);
});

after(async () => {
  relay?.kill('SIGKILL');
  await relay?.exited;
  await stack?.stop();
  await db?.drop();
});

test('postbox relay with POSTBOX_BROKER=rabbitmq: every outbox row in its partition queue once, in order per aggregate', async () => {
  const topic = uniqueTopic('rabbitrole');
  const url = stack.rabbitmq!.url;
  // A consumer group's queues exist before anything is published (RabbitMQ keeps no log).
  await ensureExchanges({ url }, [{ topic, partitions: 3 }], ['billing']);
  relay = spawnPostbox(['relay'], {
    DATABASE_URL: db.url,
    POSTBOX_BROKER: 'rabbitmq',
    RABBITMQ_URL: url,
    KAFKA_BROKERS: '127.0.0.1:1',
    POSTBOX_TOPICS: `${topic}:3`,
    POSTBOX_RELAY_THREADS: '1',
    LOG_LEVEL: 'warn',
  });
  const written = await writeEvents(db.sql, topic, 40, 3, 500, 'q');
  const published = await allPublished(db.sql, topic, written).catch((e: unknown) => {
    throw new Error(`${(e as Error).message}\n${relay!.output().slice(-3000)}`);
  });
  for (const row of published) {
    assert.equal(row.broker_partition, partitionForKey(row.aggregate_id, 3));
    assert.equal(row.broker_offset, null, 'queues have no positions');
  }
  const client = await new AMQPClient(url).connect();
  const ch = await client.channel();
  const seen = new Map<string, number[]>();
  let count = 0;
  for (let p = 0; p < 3; p++)
    for (const m of await drainQueue(ch, queueName(topic, 'billing', p))) {
      count++;
      const h = m.properties.headers ?? {};
      const aggregate = String(h.cloudEvents_subject);
      assert.equal(partitionForKey(aggregate, 3), p, 'in its partition queue');
      assert.equal(h.cloudEvents_partitionkey, aggregate);
      assert.equal(m.properties.messageId, h.cloudEvents_id);
      seen.set(aggregate, [...(seen.get(aggregate) ?? []), Number(h.cloudEvents_aggregateversion)]);
    }
  await client.close();
  assert.equal(count, written, 'each row once');
  for (const [aggregate, versions] of seen) assert.deepEqual(versions, [1, 2, 3], aggregate);
  relay.kill('SIGTERM');
  assert.equal(await relay.exited, 0, 'a graceful stop');
  relay = null;
});

test('a message no queue takes fails for good, never confirmed', async () => {
  const url = stack.rabbitmq!.url;
  const topic = uniqueTopic('rabbitnone');
  const partitions = await ensureExchanges({ url }, [{ topic, partitions: 2 }]);
  const publisher = new RabbitPublisher({ url, partitions });
  const id = newEventId();
  // The same id twice at once, and a message without an id: each send is matched to its own return.
  const outcomes = await publisher.publish([
    { topic, key: 'k', value: Buffer.from('{}'), headers: { id, type: 'T' } },
    { topic, key: 'j', value: Buffer.from('{}'), headers: { id, type: 'T' } },
    { topic, key: 'i', value: Buffer.from('{}'), headers: { type: 'T' } },
  ]);
  await publisher.close();
  assert.equal(outcomes.length, 3);
  for (const outcome of outcomes) {
    assert.ok(!outcome.ok, 'never confirmed');
    assert.equal(outcome.error.code, 'rabbitmq_unroutable');
    assert.equal(outcome.error.kind, 'permanent');
  }
});

test('postbox verify on RabbitMQ says it has no log to read, and checks the database side: a row never published is found', async () => {
  const topic = uniqueTopic('rabbitverify');
  const env = {
    DATABASE_URL: db.url,
    POSTBOX_BROKER: 'rabbitmq',
    RABBITMQ_URL: stack.rabbitmq!.url,
    KAFKA_BROKERS: '127.0.0.1:1',
    POSTBOX_TOPICS: `${topic}:2`,
  };
  // No relay runs: the rows stay pending, which the final check refuses.
  await writeEvents(db.sql, topic, 3, 1, 500, 'v');
  const p = spawnPostbox(['verify', '--topic', topic, '--final'], env);
  assert.equal(await p.exited, 1, p.output());
  assert.match(p.output(), /RabbitMQ keeps no log/);
  assert.match(p.output(), /3 outbox rows not published yet/);
  // Confirmed by the broker and never applied by the group that reads the topic: with no log to compare, a lost
  // message shows on the consumer's side — still in flight when nothing may be.
  await db.sql`UPDATE message_outbox SET status = 'published', published_at = now(), broker_partition = 0 WHERE topic = ${topic}`;
  await registerConsumer(db.sql, { name: 'never-ran', groupId: 'postbox.never-ran', topics: [topic] });
  const lost = spawnPostbox(['verify', '--consumer', 'never-ran', '--final'], env);
  assert.equal(await lost.exited, 1, lost.output());
  assert.match(lost.output(), /consumer never-ran .*: 3 events/);
  assert.match(lost.output(), /3 events still in flight/);
});
