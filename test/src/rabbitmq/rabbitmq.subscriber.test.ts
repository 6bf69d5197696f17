import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, newEventId, type Sql } from '@postbox/engine';
import { AMQPClient } from '@cloudamqp/amqp-client';
import { ensureExchanges, queueName, RabbitPublisher, RabbitSubscriber } from '@postbox/engine/rabbitmq';
import { PartitionLeases, type OutboundMessage } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { restart, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { waitFor } from '../support/processes.ts';
import { RecordingSink } from '../support/recording-sink.ts';

// What RabbitMQ's subscriber does beyond the conformance suite's cases (issue 22): a delivery is never held past
// the broker's consumer timeout (it is given back and read again before), and a channel the broker closes — the
// node restarted — is revocation: the partition is read again, what was not acknowledged comes again, and
// reading goes on.
let node: PrivateStack;
let db: TestDatabase;
let sql: Sql;
const closing: Array<{ close(): Promise<void> }> = [];

before(async () => {
  [node, db] = await Promise.all([startPrivateStack({ rabbitmq: true }), freshDatabase()]);
  sql = connect({ url: db.url, max: 2, applicationName: 'postbox-rabbitmq-test' });
});

after(async () => {
  for (const c of closing.splice(0)) await c.close().catch(() => {});
  await sql?.end({ timeout: 5 });
  await node?.stop();
  await db?.drop();
});

const url = () => node.rabbitmq!.url;

function messages(topic: string, count: number): OutboundMessage[] {
  return Array.from({ length: count }, (_, i) => ({
    topic,
    key: `k-${i}`,
    value: Buffer.from(JSON.stringify({ i })),
    headers: { id: newEventId(), type: 'RabbitTestEvent' },
  }));
}

async function setup(topic: string, group: string) {
  const partitions = await ensureExchanges({ url: url() }, [{ topic, partitions: 1 }], [group]);
  const publisher = new RabbitPublisher({ url: url(), partitions });
  closing.push(publisher);
  const errors: Error[] = [];
  const subscriber = (consumerTimeoutMs?: number) => {
    const s = new RabbitSubscriber({
      url: url(),
      groupId: group,
      topics: [topic],
      partitions,
      assignment: new PartitionLeases({ sql, groupId: group, owner: `m-${closing.length}`, leaseMs: 3000 }),
      ...(consumerTimeoutMs === undefined ? {} : { consumerTimeoutMs }),
      onError: (error) => errors.push(error),
    });
    closing.push(s);
    return s;
  };
  const publish = async (sent: OutboundMessage[]) => {
    const outcomes = await publisher.publish(sent, { timeoutMs: 30_000 });
    assert.ok(
      outcomes.every((o) => o.ok),
      JSON.stringify(outcomes.filter((o) => !o.ok)),
    );
  };
  return { subscriber, publish, errors };
}

test('a delivery held near the consumer timeout is given back and read again (never closed by the broker), then committed for good', async () => {
  const { subscriber, publish, errors } = await setup('rmq-timeout', 'g-timeout');
  const sent = messages('rmq-timeout', 3);
  await publish(sent);
  const sink = new RecordingSink();
  const s = subscriber(3000);
  await s.start(sink);
  // Taken and never committed: each comes twice, with a new offset the second time.
  await waitFor('each delivered twice', async () => sink.records.length >= 6, 30_000);
  const ids = sent.map((m) => m.headers.id);
  assert.deepEqual(
    sink.records.slice(0, 6).map((r) => r.headers.id),
    [...ids, ...ids],
  );
  assert.deepEqual(
    sink.records.slice(0, 6).map((r) => r.offset),
    ['0', '1', '2', '3', '4', '5'],
  );
  assert.ok(
    errors.some((e) => (e as { code?: string }).code === 'rabbitmq_held_too_long'),
    errors.map((e) => e.message).join('; '),
  );
  const last = sink.records.at(-1)!;
  await s.commit([{ topic: 'rmq-timeout', partition: 0, offset: String(BigInt(last.offset) + 1n) }]);
  await waitFor('the queue empty and nothing held', async () => (await s.lag()).every((l) => l.lag === 0), 10_000);
  await s.close();
});

test('the node restarted: the partition is read again — what was not acknowledged comes again, and what is published after', async () => {
  const { subscriber, publish, errors } = await setup('rmq-restart', 'g-restart');
  const before = messages('rmq-restart', 4);
  await publish(before);
  const sink = new RecordingSink();
  const s = subscriber();
  await s.start(sink);
  await waitFor('four records', async () => sink.records.length === 4, 30_000);
  // The first two committed; the last two held unacknowledged when the node goes.
  await s.commit([{ topic: 'rmq-restart', partition: 0, offset: sink.records[2]!.offset }]);
  await waitFor('the ack written', async () => (await s.lag())[0]!.lag === 2, 10_000);
  await node.rabbitmq!.stop();
  await restart(node.rabbitmq!);
  const afterRestart = messages('rmq-restart', 2);
  await publish(afterRestart);
  const expected = [before[2], before[3], ...afterRestart].map((m) => m!.headers.id);
  await waitFor('the unacknowledged two again, then the new two', async () => sink.records.length >= 8, 90_000, 200);
  assert.deepEqual(
    sink.records.slice(4).map((r) => r.headers.id),
    expected,
  );
  assert.ok(errors.length > 0, 'the lost channel was reported');
  await s.close();
});

test('a group queue of another shape (a classic queue) is refused by name at start, not used', async () => {
  const topic = 'rmq-shape';
  await ensureExchanges({ url: url() }, [{ topic, partitions: 1 }]);
  const client = await new AMQPClient(url()).connect();
  try {
    await (await client.channel()).queueDeclare(queueName(topic, 'g-shape', 0), { durable: true });
  } finally {
    await client.close();
  }
  const s = new RabbitSubscriber({
    url: url(),
    groupId: 'g-shape',
    topics: [topic],
    partitions: new Map([[topic, 1]]),
    assignment: new PartitionLeases({ sql, groupId: 'g-shape', owner: 'm-shape', leaseMs: 3000 }),
  });
  closing.push(s);
  await assert.rejects(s.start(new RecordingSink()), (e: Error) => {
    assert.equal(e.name, 'ConfigError');
    assert.match(e.message, /rmq-shape:g-shape:0 exists with another shape/);
    return true;
  });
});
