import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { enqueue } from '@postbox/engine';
import { KafkaPublisher } from '@postbox/engine/kafka';
import { inlineExecutor, Relay, resolveRelayOptions, type LaneExecutor } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, readTopic, uniqueTopic } from '../support/kafka.ts';
import { stack } from '../support/stack.ts';

// A commit whose wake-up arrives while its lane's cycle is running must not wait for the poll: the cycle's claim
// may have run before that commit, and the end of the cycle used to set the lane's next run a poll away, over the
// wake-up (tail latency of up to the poll interval under a live load).
let db: TestDatabase;
let relay: Relay | null = null;
const topic = uniqueTopic('wakebusy');

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 1);
});

after(async () => {
  await relay?.stop();
  await db.drop();
});

test('a wake-up that arrives during the lane’s cycle runs the lane again when the cycle ends, not a poll later', {
  timeout: 60_000,
}, async () => {
  const event = (v: number) => ({ event_type: 'WakeBusy', aggregate_id: 'wb-1', aggregate_version: v, data: { v } });
  await db.sql.begin((tx) => enqueue(tx, event(1), { topic, producer: 'wake-test' }));
  const options = resolveRelayOptions({ pollMs: 60_000 });
  const publisher = new KafkaPublisher({ brokers: stack.KAFKA_BROKERS.split(','), clientId: 'postbox-wake-test' });
  const inner = inlineExecutor({ sql: db.sql, publisher, options });
  let injected = false;
  // After the first cycle that sent something, and before it returns: v2 commits, and its wake-up arrives while
  // the lane is still busy.
  const executor: LaneExecutor = {
    ...inner,
    run: async (task) => {
      const result = await inner.run(task);
      if (!injected && result.published > 0) {
        injected = true;
        await db.sql.begin((tx) => enqueue(tx, event(2), { topic, producer: 'wake-test' }));
        relay!.wake(null);
      }
      return result;
    },
  };
  relay = new Relay({ sql: db.sql, executor, options });
  await relay.start();
  const started = Date.now();
  const records = await readTopic(topic, (r) => r.length >= 2, 20_000);
  const waited = Date.now() - started;
  assert.ok(injected, 'v2 was committed during a cycle');
  assert.deepEqual(
    records.map((r) => Number(r.headers.ce_aggregateversion)),
    [1, 2],
  );
  assert.ok(
    waited < options.pollMs / 2,
    `v2 published ${waited} ms after start, not a poll (${options.pollMs} ms) later`,
  );
});
