import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { enqueueMany, type EventInput } from '@postbox/engine';
import { partitionForKey, streamName } from '@postbox/engine/nats';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, type RoleProcess } from '../support/processes.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { allPublished } from '../support/relay.ts';

// POSTBOX_BROKER=nats selects NATS JetStream for `postbox relay` (issue 22, selection): the relay process makes
// the topic's streams, publishes from its worker thread, and stores (partition, stream sequence).
let stack: PrivateStack;
let db: TestDatabase;
let nc: NatsConnection | null = null;
let relay: RoleProcess | null = null;

before(async () => {
  [stack, db] = await Promise.all([startPrivateStack({ nats: true }), freshDatabase()]);
});

after(async () => {
  relay?.kill('SIGKILL');
  await relay?.exited;
  await nc?.close();
  await stack?.stop();
  await db?.drop();
});

test('postbox relay with POSTBOX_BROKER=nats: streams made, every outbox row published once to its partition stream, positions stored', async () => {
  const topic = uniqueTopic('natsrole');
  relay = spawnPostbox(['relay'], {
    DATABASE_URL: db.url,
    POSTBOX_BROKER: 'nats',
    NATS_URL: stack.nats!.url,
    // No Kafka here: a relay that still reached for it would never start.
    KAFKA_BROKERS: '127.0.0.1:1',
    POSTBOX_TOPICS: `${topic}:3`,
    POSTBOX_RELAY_THREADS: '1',
    LOG_LEVEL: 'warn',
  });
  const rows: EventInput[] = [];
  for (let v = 1; v <= 3; v++)
    for (let a = 0; a < 40; a++)
      rows.push({ event_type: 'OrderPlaced', aggregate_id: `r-${a}`, aggregate_version: v, data: { a, v } });
  await db.sql.begin((tx) => enqueueMany(tx, rows, { topic }));
  const published = await allPublished(db.sql, topic, rows.length).catch((e: unknown) => {
    throw new Error(`${(e as Error).message}\n${relay!.output().slice(-3000)}`);
  });
  nc = await connect({ servers: stack.nats!.url.replace('nats://', '') });
  const jsm = await jetstreamManager(nc);
  let total = 0;
  for (let p = 0; p < 3; p++) total += (await jsm.streams.info(streamName(topic, p))).state.messages;
  assert.equal(total, rows.length, 'each event stored once over the three partition streams');
  for (const row of published) {
    assert.equal(row.broker_partition, partitionForKey(row.aggregate_id, 3));
    const m = await jsm.streams.getMessage(streamName(topic, row.broker_partition), { seq: Number(row.broker_offset) });
    assert.equal(m!.header.get('ce-id'), row.event_id, 'the stored position holds the event');
  }
  relay.kill('SIGTERM');
  assert.equal(await relay.exited, 0, 'a graceful stop');
  relay = null;
});
