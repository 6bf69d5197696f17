import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { enqueueMany, newEventId, type EventInput } from '@postbox/engine';
import { ensureStreams, NatsPublisher, partitionForKey, streamName } from '@postbox/engine/nats';
import {
  inlineExecutor,
  Relay,
  resolveRelayOptions,
  type OutboundMessage,
  type PublishOutcome,
} from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { allPublished } from '../support/relay.ts';

// The NATS JetStream publisher (issue 22) against a private nats-server: one stream per partition, the partition
// from the key as Kafka's client computes it, Nats-Msg-Id = event id (a re-send is stored once), per-key order,
// the CloudEvents NATS binding on the wire, a paused server never "confirmed"; and the relay publishing through it.
const PARTITIONS = 3;
let stack: PrivateStack;
let servers: string[];
let nc: NatsConnection;
let db: TestDatabase;
const publishers: NatsPublisher[] = [];

before(async () => {
  [stack, db] = await Promise.all([startPrivateStack({ nats: true }), freshDatabase()]);
  servers = [stack.nats!.url];
  nc = await connect({ servers: stack.nats!.url.replace('nats://', '') });
});

after(async () => {
  for (const p of publishers) await p.close();
  await nc?.close();
  await stack?.stop();
  await db?.drop();
});

async function publisherFor(topic: string): Promise<NatsPublisher> {
  const partitions = await ensureStreams({ servers }, [{ topic, partitions: PARTITIONS }], {
    duplicateWindowMs: 60_000,
  });
  const publisher = new NatsPublisher({ servers, partitions });
  publishers.push(publisher);
  return publisher;
}

function messages(topic: string, keys: number, versions: number): OutboundMessage[] {
  const out: OutboundMessage[] = [];
  for (let v = 1; v <= versions; v++)
    for (let k = 0; k < keys; k++)
      out.push({
        topic,
        key: `agg-${k}`,
        value: Buffer.from(JSON.stringify({ k, v })),
        headers: { id: newEventId(), type: 'T', aggregateversion: String(v), datacontenttype: 'application/json' },
      });
  return out;
}

function confirmed(outcomes: PublishOutcome[]) {
  return outcomes.map((o) => {
    assert.ok(o.ok, `not confirmed: ${o.ok ? '' : `${o.error.code} ${o.error.message}`}`);
    return o.confirmation;
  });
}

/** Every message of the topic's streams, in stream order per partition. */
async function stored(topic: string) {
  const jsm = await jetstreamManager(nc);
  const out: Array<{ partition: number; seq: number; id: string; msgId: string; version: number; key: string }> = [];
  for (let p = 0; p < PARTITIONS; p++) {
    const name = streamName(topic, p);
    const info = await jsm.streams.info(name);
    for (let seq = 1; seq <= info.state.last_seq; seq++) {
      const m = await jsm.streams.getMessage(name, { seq });
      const data = m!.json<{ k: number; v: number }>();
      out.push({
        partition: p,
        seq,
        id: m!.header.get('ce-id'),
        msgId: m!.header.get('Nats-Msg-Id'),
        version: Number(m!.header.get('ce-aggregateversion')),
        key: `agg-${data.k}`,
      });
    }
  }
  return out;
}

test("each message confirmed with (partition, stream sequence): Kafka's partition for its key, dense sequences, per-key order, the NATS binding's headers", async () => {
  const topic = uniqueTopic('natspub');
  const publisher = await publisherFor(topic);
  const sent = messages(topic, 12, 5);
  const confirmations = confirmed(await publisher.publish(sent));
  sent.forEach((m, i) => {
    assert.equal(confirmations[i]!.partition, partitionForKey(m.key, PARTITIONS), `${m.key}: the key's partition`);
    assert.equal(confirmations[i]!.duplicate, false);
  });
  for (let p = 0; p < PARTITIONS; p++) {
    const offsets = confirmations.filter((c) => c.partition === p).map((c) => Number(c.offset));
    assert.deepEqual(
      [...offsets].sort((a, b) => a - b),
      offsets.map((_, i) => i + 1),
      `partition ${p}: sequences 1..n`,
    );
  }
  const log = await stored(topic);
  assert.equal(log.length, sent.length);
  const byId = new Map(sent.map((m) => [m.headers.id!, m]));
  for (const r of log) {
    assert.equal(r.msgId, r.id, 'Nats-Msg-Id is the event id');
    assert.equal(byId.get(r.id)?.key, r.key, 'ce-id names the message');
  }
  for (let k = 0; k < 12; k++) {
    const versions = log.filter((r) => r.key === `agg-${k}`).map((r) => r.version);
    assert.deepEqual(versions, [1, 2, 3, 4, 5], `agg-${k} in order`);
  }
});

test('the same ids sent again are stored once: confirmed as duplicates with the first sequences', async () => {
  const topic = uniqueTopic('natsdup');
  const publisher = await publisherFor(topic);
  const sent = messages(topic, 4, 3);
  const first = confirmed(await publisher.publish(sent));
  const again = confirmed(await publisher.publish(sent));
  assert.deepEqual(
    again.map((c) => [c.partition, c.offset, c.duplicate]),
    first.map((c) => [c.partition, c.offset, true]),
  );
  assert.equal((await stored(topic)).length, sent.length, 'nothing stored twice');
});

test('a message over max_payload fails for good before it is sent; the others, of its key too, are confirmed', async () => {
  const topic = uniqueTopic('natsbig');
  const publisher = await publisherFor(topic);
  const sent = messages(topic, 2, 3);
  sent[2] = { ...sent[2]!, value: Buffer.alloc(1024 * 1024 + 1, 'x') };
  const outcomes = await publisher.publish(sent);
  const bad = outcomes[2]!;
  assert.ok(!bad.ok && bad.error.kind === 'permanent' && bad.error.code === 'message_too_large', JSON.stringify(bad));
  assert.equal(outcomes.filter((o) => o.ok).length, sent.length - 1);
  assert.equal((await stored(topic)).length, sent.length - 1);
});

test('a paused server: by the deadline nothing is confirmed (unknown or transient); resumed, the same messages are stored once', async () => {
  const topic = uniqueTopic('natsstop');
  const publisher = await publisherFor(topic);
  const sent = messages(topic, 3, 2);
  await stack.nats!.signal('SIGSTOP');
  let during: PublishOutcome[];
  try {
    during = await publisher.publish(sent, { timeoutMs: 1500 });
  } finally {
    await stack.nats!.signal('SIGCONT');
  }
  for (const o of during) assert.ok(!o.ok && (o.error.kind === 'unknown' || o.error.kind === 'transient'));
  assert.ok(
    during.some((o) => !o.ok && o.error.kind === 'unknown'),
    'the sends in flight are unknown',
  );
  const after = confirmed(await publisher.publish(sent, { timeoutMs: 10_000 }));
  assert.equal(after.length, sent.length);
  assert.equal((await stored(topic)).length, sent.length, 'sent during the pause or after: each stored once');
});

test('the relay publishes outbox rows through NATS: published with (partition, stream sequence), each stored once', async () => {
  const topic = uniqueTopic('natsrelay');
  const publisher = await publisherFor(topic);
  const options = resolveRelayOptions({ pollMs: 200 });
  const relay = new Relay({ sql: db.sql, executor: inlineExecutor({ sql: db.sql, publisher, options }), options });
  await relay.start();
  try {
    const rows: EventInput[] = [];
    for (let v = 1; v <= 4; v++)
      for (let a = 0; a < 25; a++)
        rows.push({ event_type: 'OrderPlaced', aggregate_id: `o-${a}`, aggregate_version: v, data: { a, v } });
    await db.sql.begin((tx) => enqueueMany(tx, rows, { topic }));
    relay.wake();
    const published = await allPublished(db.sql, topic, rows.length, 30_000);
    const log = await stored(topic);
    assert.equal(log.length, rows.length, 'each event stored once');
    const at = new Map(log.map((r) => [r.id, `${r.partition}/${r.seq}`]));
    for (const row of published) {
      assert.equal(row.broker_partition, partitionForKey(row.aggregate_id, PARTITIONS));
      assert.equal(at.get(row.event_id), `${row.broker_partition}/${row.broker_offset}`, 'the stored position');
    }
  } finally {
    await relay.stop();
  }
});
