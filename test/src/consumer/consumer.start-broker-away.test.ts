import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { totals } from '@postbox/engine/verify';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { alive, Pipeline, stopGracefully } from '../support/pipeline.ts';
import { createPrivateTopic, restart, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { waitFor } from '../support/processes.ts';

// `postbox consume` started while its broker is away (a consumer restarted by its supervisor during a broker
// failover, or started beside the broker) waits for it and starts once it is back, as the relay does — it does not
// exit with start_failed. Its topic is not among POSTBOX_TOPICS, so nothing before the consumer's own start waits
// for the broker (the saga consumers' case, found by the soak: a payments consumer exited while Kafka was killed).

let stack: PrivateStack | undefined;
let db: TestDatabase | undefined;
let p: Pipeline | undefined;

after(async () => {
  await p?.stopAll();
  await db?.drop().catch(() => {});
  await stack?.stop();
});

test('a consumer started while Kafka is down waits, starts when Kafka is back, and applies everything', {
  timeout: 300_000,
}, async () => {
  stack = await startPrivateStack({ postgres: {}, redis: true, kafka: {} });
  db = await freshDatabase('pbsa', stack.urls.DATABASE_URL!);
  const topic = uniqueTopic('away');
  await createPrivateTopic(stack, topic, 2);
  p = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: stack.urls.KAFKA_BROKERS!,
    redisUrl: stack.urls.REDIS_URL!,
    topic,
    partitions: 2,
    consumer: `away${topic.slice(-6)}`,
  });
  await p.setup();
  await stack.kafka!.signal('SIGKILL');
  const consumer = p.consumer({ POSTBOX_TOPICS: 'unrelated.events:1' });
  await sleep(8000);
  assert.ok(alive(consumer), `the consumer exited while Kafka was down:\n${consumer.output()}`);
  await restart(stack.kafka!);
  p.relay();
  const writer = p.writer({ WRITER_RATE: '20', WRITER_AGGREGATES: '10' });
  await waitFor(
    'the writer to commit events',
    async () =>
      (await p!.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_outbox WHERE topic = ${topic}`)[0]!.n > 50,
    60_000,
  );
  await stopGracefully(writer, 'writer', 'writer started');
  const report = await p.settle(120_000);
  const t = totals(report);
  assert.ok(t.events > 50, `events written: ${t.events}`);
  assert.equal(t.lost + t.appliedTwice + t.reordered, 0);
  assert.ok(alive(consumer), 'the consumer that waited is the one that applied them');
});
