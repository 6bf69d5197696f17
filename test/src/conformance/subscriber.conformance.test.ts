import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { newEventId } from '@postbox/engine';
import type { InboundRecord, OutboundMessage, TopicPartition } from '@postbox/engine/runtime';
import { waitFor } from '../support/processes.ts';
import { RecordingSink } from '../support/recording-sink.ts';
import { ADAPTERS, uniqueName } from './adapters.ts';

// One conformance suite for every broker adapter (issue 22), the subscriber's half: the Subscriber port's contract
// (ports/subscriber.ts) checked against the real broker — watermark commits, a graceful stop that keeps them,
// backpressure, a group shared and handed over, lag — the same cases for each adapter.

function messages(topic: string, count: number, keys = 10): OutboundMessage[] {
  return Array.from({ length: count }, (_, i) => ({
    topic,
    key: `k-${i % keys}`,
    value: Buffer.from(JSON.stringify({ i })),
    headers: { id: newEventId(), type: 'ConformanceEvent', aggregateversion: String(Math.floor(i / keys) + 1) },
  }));
}

const byPosition = (a: InboundRecord, b: InboundRecord) =>
  a.partition === b.partition ? Number(BigInt(a.offset) - BigInt(b.offset)) : a.partition - b.partition;

for (const make of ADAPTERS) {
  const adapter = make();
  // Declared, not skipped: an adapter without the port says why (docs/brokers.md shows it).
  if (adapter.features.subscriber !== true) continue;
  describe(`${adapter.name} subscriber (assignment: ${adapter.features.assignment})`, () => {
    before(() => adapter.setup());
    after(() => adapter.teardown());

    const publish = async (sent: OutboundMessage[]) => {
      const outcomes = await adapter.publisher().publish(sent);
      assert.ok(outcomes.every((o) => o.ok));
    };

    test('watermark commit kept over a graceful stop: records 1, 2 committed, 3 not (4, 5 done or not): the next member reads 3, 4, 5 again', async () => {
      const topic = uniqueName('conf-wm');
      const group = uniqueName('g-wm');
      await adapter.createTopic(topic, 1, [group]);
      await publish(messages(topic, 5));
      const first = new RecordingSink();
      const a = adapter.subscriber(group, [topic], 'a');
      await a.start(first);
      await waitFor('five records', async () => first.records.length === 5, 60_000);
      const got = first.records.sort(byPosition);
      await a.commit([{ topic, partition: 0, offset: got[2]!.offset }]);
      await a.close();
      const second = new RecordingSink();
      const b = adapter.subscriber(group, [topic], 'b');
      await b.start(second);
      await waitFor('three records again', async () => second.records.length >= 3, 60_000);
      await sleep(500);
      assert.deepEqual(
        second.records.sort(byPosition).map((r) => r.headers.id),
        got.slice(2).map((r) => r.headers.id),
      );
      await b.close();
    });

    test('backpressure: a sink at its cap pauses; nothing is offered while paused; on resume the rest comes, each once', async () => {
      const topic = uniqueName('conf-bp');
      const group = uniqueName('g-bp');
      await adapter.createTopic(topic, 3, [group]);
      await publish(messages(topic, 300, 30));
      const sink = new RecordingSink();
      sink.cap = 60;
      const s = adapter.subscriber(group, [topic], 'a');
      const all: TopicPartition[] = [0, 1, 2].map((partition) => ({ topic, partition }));
      sink.onFull = () => s.pause(all);
      await s.start(sink);
      await waitFor('the cap reached', async () => sink.records.length === 60, 60_000);
      await sleep(1500);
      assert.equal(sink.records.length, 60, 'nothing taken past the cap while paused');
      sink.cap = Number.POSITIVE_INFINITY;
      s.resume(all);
      await waitFor('the rest', async () => new Set(sink.records.map((r) => r.headers.id)).size === 300, 60_000);
      await sleep(500);
      assert.equal(sink.records.length, 300, 'each record once');
      await s.close();
    });

    test('two members share the partitions; one leaves, the other takes them over and reads what comes', async () => {
      const topic = uniqueName('conf-grp');
      const group = uniqueName('g-grp');
      await adapter.createTopic(topic, 4, [group]);
      const [sa, sb] = [new RecordingSink(), new RecordingSink()];
      const a = adapter.subscriber(group, [topic], 'a');
      await a.start(sa);
      await waitFor('a holds all four', async () => sa.held().length === 4, 60_000);
      const b = adapter.subscriber(group, [topic], 'b');
      await b.start(sb);
      await waitFor(
        'a share each',
        async () => sa.held().length > 0 && sb.held().length > 0 && sa.held().length + sb.held().length === 4,
        60_000,
      );
      assert.deepEqual(
        [...sa.held(), ...sb.held()].sort(),
        [0, 1, 2, 3].map((p) => `${topic}:${p}`),
      );
      await a.close();
      await waitFor('b holds all four', async () => sb.held().length === 4, 60_000);
      const sent = messages(topic, 80, 40);
      await publish(sent);
      const ids = new Set(sent.map((m) => m.headers.id));
      await waitFor(
        'b reads all that came',
        async () => sb.records.filter((r) => ids.has(r.headers.id!)).length === 80,
        60_000,
      );
      await b.close();
    });

    test('lag: what the group has not committed, per partition, with the committed and high positions', async () => {
      const topic = uniqueName('conf-lag');
      const group = uniqueName('g-lag');
      await adapter.createTopic(topic, 1, [group]);
      await publish(messages(topic, 10));
      const sink = new RecordingSink();
      const s = adapter.subscriber(group, [topic], 'a');
      await s.start(sink);
      await waitFor('ten records', async () => sink.records.length === 10, 60_000);
      const got = sink.records.sort(byPosition);
      await s.commit([{ topic, partition: 0, offset: got[4]!.offset }]);
      const lag = (await s.lag()).find((l) => l.topic === topic && l.partition === 0);
      assert.deepEqual(lag, {
        topic,
        partition: 0,
        committed: got[4]!.offset,
        high: String(BigInt(got[9]!.offset) + 1n),
        lag: 6,
      });
      await s.close();
    });
  });
}
