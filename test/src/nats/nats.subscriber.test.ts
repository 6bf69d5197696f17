import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { newEventId } from '@postbox/engine';
import {
  durableName,
  ensureStreams,
  NatsPublisher,
  NatsSubscriber,
  partitionForKey,
  streamName,
} from '@postbox/engine/nats';
import { PartitionLeases, type OutboundMessage, type TopicPartition } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { RecordingSink } from '../support/recording-sink.ts';

// The NATS JetStream subscriber (issue 22) against a private nats-server and PostgreSQL: partitions shared by
// leases, records in stream order with their key and neutral headers, the AckAll watermark commit, a take-over
// that reads the unacknowledged at once, backpressure held in the adapter, and lag from the durables.
const PARTITIONS = 4;
let stack: PrivateStack;
let servers: string[];
let db: TestDatabase;
const closing: Array<() => Promise<void>> = [];
/** Errors the subscribers reported: none is expected in these cases. */
const errors: string[] = [];

before(async () => {
  [stack, db] = await Promise.all([startPrivateStack({ nats: true }), freshDatabase()]);
  servers = [stack.nats!.url];
});

after(async () => {
  for (const close of closing.reverse()) await close().catch(() => {});
  assert.deepEqual(errors, [], 'no subscriber reported an error');
  await stack?.stop();
  await db?.drop();
});

async function publish(topic: string, keys: number, versions: number): Promise<OutboundMessage[]> {
  const partitions = await ensureStreams({ servers }, [{ topic, partitions: PARTITIONS }]);
  const publisher = new NatsPublisher({ servers, partitions });
  const messages: OutboundMessage[] = [];
  for (let v = 1; v <= versions; v++)
    for (let k = 0; k < keys; k++)
      messages.push({
        topic,
        key: `k-${k}`,
        value: Buffer.from(JSON.stringify({ k, v })),
        headers: { id: newEventId(), type: 'T', aggregateversion: String(v), traceparent: '00-1-2-01' },
      });
  const outcomes = await publisher.publish(messages);
  await publisher.close();
  assert.ok(outcomes.every((o) => o.ok));
  return messages;
}

function member(topic: string, group: string, owner: string, options: { ackWaitMs?: number } = {}) {
  const subscriber = new NatsSubscriber({
    servers,
    groupId: group,
    topics: [topic],
    assignment: new PartitionLeases({ sql: db.sql, groupId: group, owner, leaseMs: 3000 }),
    onError: (e, p) => errors.push(`${p.topic}:${p.partition} ${e.message}`),
    ...options,
  });
  closing.push(() => subscriber.close());
  return subscriber;
}

test('one member reads every partition in stream order: key, value and neutral headers as published; a deleted message is skipped, not waited for', async () => {
  const topic = uniqueTopic('natssub');
  const all = await publish(topic, 12, 3);
  // A message deleted from the middle of partition 0's stream leaves a gap the reader must not take for a loss.
  const nc = await connect({ servers: stack.nats!.url.replace('nats://', '') });
  const jsm = await jetstreamManager(nc);
  const second = (await jsm.streams.getMessage(streamName(topic, 0), { seq: 2 }))!;
  await jsm.streams.deleteMessage(streamName(topic, 0), 2);
  await nc.close();
  const deletedId = second.header.get('ce-id');
  const sent = all.filter((m) => m.headers.id !== deletedId);
  assert.equal(sent.length, all.length - 1);
  const sink = new RecordingSink();
  const subscriber = member(topic, 'g1', 'a');
  await subscriber.start(sink);
  await waitFor('every record', async () => sink.records.length >= sent.length, 30_000);
  assert.equal(sink.records.length, sent.length, 'nothing twice');
  assert.deepEqual(
    sink.held(),
    [0, 1, 2, 3].map((p) => `${topic}:${p}`),
  );
  const byId = new Map(sent.map((m) => [m.headers.id, m]));
  const lastOffset = new Map<number, number>();
  for (const r of sink.records) {
    const m = byId.get(r.headers.id!)!;
    assert.equal(r.key, m.key);
    assert.equal(r.partition, partitionForKey(m.key, PARTITIONS));
    assert.deepEqual(r.headers, m.headers, 'the key is not an extension header');
    assert.equal(r.value!.toString(), m.value!.toString());
    assert.ok(Number(r.offset) > (lastOffset.get(r.partition) ?? 0), 'stream order per partition');
    lastOffset.set(r.partition, Number(r.offset));
  }
  await subscriber.close();
});

test('watermark commit: committed records stay acknowledged, the rest come back to the next holder at once', async () => {
  const topic = uniqueTopic('natswm');
  await publish(topic, 8, 5);
  const first = new RecordingSink();
  // An ack wait far beyond the test: what comes back came from the take-over, not from a redelivery.
  const a = member(topic, 'g2', 'a', { ackWaitMs: 600_000 });
  await a.start(first);
  await waitFor('every record', async () => first.records.length === 40, 30_000);
  const p0 = first.records.filter((r) => r.partition === 0);
  assert.ok(p0.length >= 3);
  // Offsets 1 and 2 settled (commit = next to read), 3 onwards not; nothing of the other partitions.
  await a.commit([{ topic, partition: 0, offset: String(Number(p0[1]!.offset) + 1) }]);
  const before = await a.lag();
  assert.deepEqual(
    before.find((l) => l.partition === 0),
    {
      topic,
      partition: 0,
      committed: String(Number(p0[1]!.offset) + 1),
      high: String(p0.length + 1),
      lag: p0.length - 2,
    },
  );
  await a.close();
  const second = new RecordingSink();
  const b = member(topic, 'g2', 'b', { ackWaitMs: 600_000 });
  await b.start(second);
  await waitFor('the unacknowledged again', async () => second.records.length === 40 - 2, 30_000);
  assert.deepEqual(
    second.records.filter((r) => r.partition === 0).map((r) => r.offset),
    p0.slice(2).map((r) => r.offset),
    'partition 0 from its first unacknowledged record, in order',
  );
  // The new holder's durable acknowledges as the old one did: committed everywhere, nothing left to read.
  const last = new Map<number, number>();
  for (const r of second.records) last.set(r.partition, Math.max(last.get(r.partition) ?? 0, Number(r.offset)));
  await b.commit([...last].map(([partition, offset]) => ({ topic, partition, offset: String(offset + 1) })));
  const lag = await b.lag();
  assert.deepEqual(
    lag.map((l) => [l.partition, l.lag, l.committed === l.high]),
    [0, 1, 2, 3].map((p) => [p, 0, true]),
  );
  await b.close();
});

test('two members share the partitions by lease; one leaves, the other takes its partitions and reads them', async () => {
  const topic = uniqueTopic('natsgrp');
  const group = 'g3';
  const sa = new RecordingSink();
  const sb = new RecordingSink();
  await publish(topic, 4, 1);
  const a = member(topic, group, 'a');
  await a.start(sa);
  const b = member(topic, group, 'b');
  await b.start(sb);
  await waitFor('a fair share each', async () => sa.held().length === 2 && sb.held().length === 2, 30_000);
  assert.deepEqual(
    [...sa.held(), ...sb.held()].sort(),
    [0, 1, 2, 3].map((p) => `${topic}:${p}`),
  );
  await a.close();
  await waitFor('b holds all four', async () => sb.held().length === 4, 30_000);
  const sent = await publish(topic, 40, 1);
  const ids = new Set(sent.map((m) => m.headers.id));
  await waitFor(
    'b reads what comes on every partition',
    async () => {
      const got = sb.records.filter((r) => ids.has(r.headers.id!));
      return got.length === sent.length && new Set(got.map((r) => r.partition)).size === PARTITIONS;
    },
    30_000,
  );
  const rows = await db.sql<{ owner: string | null }[]>`
    SELECT owner FROM consumer_partition_lease WHERE group_id = ${group} AND topic = ${topic}`;
  assert.deepEqual(
    rows.map((r) => r.owner),
    ['b', 'b', 'b', 'b'],
  );
  await b.close();
});

test('backpressure: a sink at its cap pauses the partition; held records come first on resume, none lost', async () => {
  const topic = uniqueTopic('natsbp');
  await publish(topic, 20, 10);
  const sink = new RecordingSink();
  sink.cap = 50;
  const subscriber = member(topic, 'g4', 'a');
  const all: TopicPartition[] = [0, 1, 2, 3].map((partition) => ({ topic, partition }));
  // The consumer pauses what it cannot take: a sink that stops taking pauses everything at once.
  sink.onFull = () => subscriber.pause(all);
  await subscriber.start(sink);
  await waitFor('the cap reached', async () => sink.records.length === 50, 30_000);
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(sink.records.length, 50, 'nothing taken past the cap');
  sink.cap = Number.POSITIVE_INFINITY;
  subscriber.resume(all);
  await waitFor('the rest', async () => sink.records.length >= 200, 30_000);
  const ids = sink.records.map((r) => `${r.partition}:${r.offset}`);
  assert.equal(new Set(ids).size, 200, 'each record once');
  await subscriber.close();
  assert.equal(durableName('orders.projection v2'), 'orders_projection_v2');
});
