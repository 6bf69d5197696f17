import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { chosenBroker, natsAnswers, StackError, type PrivateServer } from '@postbox/stack';
import { restart, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';

// The stack's NATS (issue 22, local stack): Debian's nats-server with JetStream on file storage, on a port of
// its own (never the machine's shared 4222), started by the stack's own module under a private home. What the
// NATS adapter will build on is checked here against the running server: a publish is confirmed with its
// stream sequence, a re-send under the same Nats-Msg-Id is a duplicate that names the original sequence, and a
// stream survives kill -9 of the server (file storage under the stack's home).
let stack: PrivateStack;
let nats: PrivateServer;
let nc: NatsConnection | null = null;

before(async () => {
  stack = await startPrivateStack({ nats: true });
  nats = stack.nats!;
});

after(async () => {
  await nc?.close();
  await stack?.stop();
});

test('POSTBOX_BROKER picks the broker the stack runs: kafka when unset, nats by name, anything else refused by name', () => {
  assert.equal(chosenBroker({}), 'kafka');
  assert.equal(chosenBroker({ POSTBOX_BROKER: ' NATS ' }), 'nats');
  assert.throws(
    () => chosenBroker({ POSTBOX_BROKER: 'rabit' }),
    (e: unknown) =>
      e instanceof StackError && e.code === 'bad_config' && /"rabit".*kafka, nats or rabbitmq/.test(e.message),
  );
});

test('the private NATS answers with JetStream on; a publish is confirmed with its sequence, a re-send of its id is a duplicate of that sequence; the stream outlives kill -9', async () => {
  await natsAnswers(nats.url);
  nc = await connect({ servers: nats.url.replace('nats://', '') });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'PB_orders_0', subjects: ['orders.0'], storage: StorageType.File });
  const js = jetstream(nc);
  const first = await js.publish('orders.0', 'v1', { msgID: 'event-1' });
  const second = await js.publish('orders.0', 'v2', { msgID: 'event-2' });
  const again = await js.publish('orders.0', 'v1', { msgID: 'event-1' });
  assert.deepEqual(
    [first, second, again].map((a) => [a.stream, a.seq, a.duplicate]),
    [
      ['PB_orders_0', 1, false],
      ['PB_orders_0', 2, false],
      ['PB_orders_0', 1, true],
    ],
  );
  const stored = await fs.readdir(path.join(nats.dataDir, 'jetstream'), { recursive: true });
  assert.ok(
    stored.some((f) => f.includes('PB_orders_0')),
    `the stream is stored under the stack's home: ${stored.join(', ')}`,
  );

  await nc.close();
  nc = null;
  await nats.signal('SIGKILL');
  await nats.waitForExit();
  await restart(nats);
  nc = await connect({ servers: nats.url.replace('nats://', '') });
  const info = await (await jetstreamManager(nc)).streams.info('PB_orders_0');
  assert.equal(info.state.messages, 2, 'both confirmed messages are there after kill -9 and a restart');
  assert.equal(info.state.last_seq, 2);
});
