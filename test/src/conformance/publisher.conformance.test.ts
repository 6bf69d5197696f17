import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { newEventId } from '@postbox/engine';
import { partitionForKey } from '@postbox/engine/nats';
import type { OutboundMessage, PublishOutcome } from '@postbox/engine/runtime';
import type { InboundRecord } from '@postbox/engine/runtime';
import { ADAPTERS, uniqueName } from './adapters.ts';

// One conformance suite for every broker adapter (issue 22), the publisher's half: the Publisher port's contract
// (ports/publisher.ts) checked against the real broker, the same cases for each. What an adapter cannot do is a
// declared feature (adapters.ts), never a skipped case.
const PARTITIONS = 3;

function message(topic: string, key: string, version: number, bytes = 0): OutboundMessage {
  return {
    topic,
    key,
    value: bytes > 0 ? Buffer.alloc(bytes, 120) : Buffer.from(JSON.stringify({ key, version })),
    headers: { id: newEventId(), type: 'ConformanceEvent', aggregateversion: String(version) },
  };
}

function confirmations(outcomes: PublishOutcome[]) {
  return outcomes.map((o, i) => {
    assert.ok(o.ok, `message ${i} not confirmed: ${o.ok ? '' : `${o.error.code}: ${o.error.message}`}`);
    return o.confirmation;
  });
}

for (const make of ADAPTERS) {
  const adapter = make();
  describe(`${adapter.name} publisher`, () => {
    before(() => adapter.setup());
    after(() => adapter.teardown());

    /** Everything on the topic, read with the adapter's own topic reader. */
    const readAll = async (topic: string): Promise<InboundRecord[]> => {
      const records: InboundRecord[] = [];
      await adapter.reader().read([topic], (r) => records.push({ ...r, value: r.value && Buffer.from(r.value) }));
      return records;
    };

    test('retention: a topic answered with how long the broker keeps its records and where that figure comes from', async () => {
      const topic = uniqueName('conf-ret');
      await adapter.createTopic(topic, 2);
      const [r, ...more] = await adapter.offsets().retention([topic]);
      assert.equal(more.length, 0);
      assert.equal(r!.topic, topic);
      assert.ok(r!.source.length > 0, 'the source is named');
      // Kafka: retention.ms + segment.ms of the topic; RabbitMQ: nothing consumed comes again; NATS: the streams' max_age.
      if (adapter.name.startsWith('kafka')) assert.ok(r!.retentionMs !== null && r!.retentionMs > 0, JSON.stringify(r));
      else if (adapter.name === 'rabbitmq') assert.equal(r!.retentionMs, 0);
      else assert.ok(r!.retentionMs === null || r!.retentionMs > 0, JSON.stringify(r));
    });

    test('each message confirmed where it is stored: the partition its key maps to, offsets increasing per key', async () => {
      const topic = uniqueName('conf-pub');
      await adapter.createTopic(topic, PARTITIONS);
      const sent = Array.from({ length: 30 }, (_, i) => message(topic, `k-${i % 10}`, Math.floor(i / 10) + 1));
      const confirmed = confirmations(await adapter.publisher().publish(sent));
      const records = await readAll(topic);
      assert.equal(records.length, sent.length, 'each message stored once');
      if (adapter.features.positions === 'none') {
        // Queues: the confirmation names the partition, and the message is in that partition's queue.
        const where = new Map(records.map((r) => [r.headers.id, r]));
        sent.forEach((m, i) => {
          assert.equal(confirmed[i]!.partition, partitionForKey(m.key, PARTITIONS), `${m.key}: the key's partition`);
          assert.equal(confirmed[i]!.offset, undefined, 'no position to name');
          assert.equal(where.get(m.headers.id)?.partition, confirmed[i]!.partition, 'stored in that partition');
          assert.equal(where.get(m.headers.id)?.key, m.key);
        });
        return;
      }
      const stored = new Map(records.map((r) => [`${r.partition}/${r.offset}`, r]));
      // Keys go in parallel: offsets increase per key (its messages in order), and no two share a position.
      const last = new Map<string, bigint>();
      sent.forEach((m, i) => {
        const c = confirmed[i]!;
        assert.equal(c.partition, partitionForKey(m.key, PARTITIONS), `${m.key}: the key's partition`);
        assert.ok(c.offset !== undefined, 'a log names the position');
        const record = stored.get(`${c.partition}/${c.offset}`);
        assert.equal(record?.headers.id, m.headers.id, 'the confirmed position holds the message');
        assert.equal(record?.key, m.key);
        const offset = BigInt(c.offset);
        assert.ok(offset > (last.get(m.key) ?? -1n), `${m.key}: offsets increase in the order given`);
        last.set(m.key, offset);
      });
      assert.equal(new Set(confirmed.map((c) => `${c.partition}/${c.offset}`)).size, sent.length, 'one position each');
    });

    test('per-key order over the partitions: each key’s messages stored in the order given', async () => {
      const topic = uniqueName('conf-order');
      await adapter.createTopic(topic, PARTITIONS);
      const sent: OutboundMessage[] = [];
      for (let v = 1; v <= 8; v++) for (let k = 0; k < 25; k++) sent.push(message(topic, `o-${k}`, v));
      confirmations(await adapter.publisher().publish(sent));
      const byKey = new Map<string, number[]>();
      const records = (await readAll(topic)).sort((a, b) =>
        a.partition === b.partition ? Number(BigInt(a.offset) - BigInt(b.offset)) : a.partition - b.partition,
      );
      for (const r of records) byKey.set(r.key!, [...(byKey.get(r.key!) ?? []), Number(r.headers.aggregateversion)]);
      assert.equal(byKey.size, 25);
      for (const [key, versions] of byKey) assert.deepEqual(versions, [1, 2, 3, 4, 5, 6, 7, 8], key);
    });

    test(`the same message id twice: ${adapter.features.brokerDedup ? 'stored once, confirmed as a duplicate of the first' : 'stored twice (no broker dedup: the inbox absorbs it)'}`, async () => {
      const topic = uniqueName('conf-dedup');
      await adapter.createTopic(topic, PARTITIONS);
      const m = message(topic, 'd-1', 1);
      const publisher = adapter.publisher();
      const [first] = confirmations(await publisher.publish([m]));
      const [again] = confirmations(await publisher.publish([m]));
      const copies = (await readAll(topic)).filter((r) => r.headers.id === m.headers.id);
      if (adapter.features.brokerDedup) {
        assert.equal(copies.length, 1);
        assert.equal(again!.duplicate, true);
        assert.equal(again!.offset, first!.offset, 'the first send’s position');
        assert.equal(again!.partition, first!.partition);
      } else {
        assert.equal(copies.length, 2);
        assert.notEqual(again!.duplicate, true);
      }
    });

    test('a batch with one message over the size limit: that one fails for good, the others are confirmed', async () => {
      const topic = uniqueName('conf-size');
      await adapter.createTopic(topic, PARTITIONS);
      const batch = [message(topic, 's-1', 1), message(topic, 's-2', 1, 2 * 1024 * 1024), message(topic, 's-3', 1)];
      const outcomes = await adapter.publisher().publish(batch);
      assert.ok(outcomes[0]!.ok && outcomes[2]!.ok, 'the neighbours are confirmed');
      const oversize = outcomes[1]!;
      assert.ok(!oversize.ok && oversize.error.kind === 'permanent', JSON.stringify(oversize));
      const ids = new Set((await readAll(topic)).map((r) => r.headers.id));
      assert.deepEqual([...ids].sort(), [batch[0]!.headers.id, batch[2]!.headers.id].sort());
    });

    test('a broker that cannot be reached: by the deadline every message has failed (transient or unknown), none confirmed', async () => {
      const topic = uniqueName('conf-down');
      const outcomes = await adapter
        .publisher({ unreachable: true })
        .publish([message(topic, 'u-1', 1), message(topic, 'u-2', 1)], { timeoutMs: 3000 });
      assert.equal(outcomes.length, 2);
      for (const o of outcomes) {
        assert.ok(!o.ok, 'never confirmed');
        assert.ok(o.error.kind === 'transient' || o.error.kind === 'unknown', `${o.error.kind}: ${o.error.message}`);
      }
    });
  });
}
