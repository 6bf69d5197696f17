import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { KafkaPublisher } from '@postbox/engine/kafka';
import type { PublishOutcome } from '@postbox/engine/runtime';
import { FaultProxy } from '../support/fault-proxy.ts';
import { createTopic, readTopic, uniqueTopic } from '../support/kafka.ts';
import { stack } from '../support/stack.ts';

// A broker that accepts connections and answers nothing (SIGSTOP, a hung host) while the publisher connects:
// kafkajs keeps the seed broker's socket but never got its API versions, and every later connect of that client
// "succeeds" at once and then throws "Broker not connected". The publisher must get out by itself once the
// broker answers again. The proxy stands in front of the shared broker as the only bootstrap address; metadata
// then sends the producer straight to the broker.
let proxy: FaultProxy;
const topic = uniqueTopic('hung-seed');

before(async () => {
  const [host, port] = stack.KAFKA_BROKERS.split(',')[0]!.split(':');
  proxy = await FaultProxy.start({ upstream: { host: host!, port: Number(port) } });
  await createTopic(topic, 1);
});

after(async () => {
  await proxy?.close();
});

test('a publisher whose first connect hit a hung broker publishes once the broker answers', {
  timeout: 90_000,
}, async () => {
  const publisher = new KafkaPublisher({
    brokers: [proxy.address],
    clientId: 'postbox-test-hung',
    connectionTimeoutMs: 1000,
    requestTimeoutMs: 1000,
    ackTimeoutMs: 2000,
  });
  const message = (i: number) => ({ topic, key: 'hung', value: Buffer.from(`m${i}`), headers: { id: `hung-${i}` } });
  try {
    proxy.setMode('blackhole');
    const [hung] = await publisher.publish([message(0)], { timeoutMs: 8000 });
    assert.equal(hung!.ok, false, 'nothing answers: the send fails');

    proxy.setMode('forward');
    const errors: string[] = [];
    let sent: PublishOutcome | undefined;
    let value = '';
    for (let i = 1; i <= 6 && !sent?.ok; i++) {
      [sent] = await publisher.publish([message(i)], { timeoutMs: 8000 });
      value = `m${i}`;
      if (!sent!.ok) {
        errors.push(sent!.error.message);
        await sleep(500);
      }
    }
    assert.ok(sent?.ok, `the broker answers again, yet every send failed: ${errors.join(' | ')}`);
    const { offset } = sent.confirmation;
    const records = await readTopic(topic, (r) => r.some((x) => x.offset === offset), 30_000);
    assert.equal(
      records.find((r) => r.offset === offset)?.value.toString(),
      value,
      'the confirmed record is on the topic at its offset',
    );
  } finally {
    await publisher.close();
  }
});
