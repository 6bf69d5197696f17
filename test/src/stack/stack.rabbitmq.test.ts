import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { AMQPClient, type AMQPBaseClient } from '@cloudamqp/amqp-client';
import { chosenBroker, rabbitmqAnswers, type PrivateServer } from '@postbox/stack';
import { restart, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { waitFor } from '../support/processes.ts';

/** Whether something accepts a TCP connection on the port. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}

// The stack's RabbitMQ (issue 22, local stack): Debian's rabbitmq-server run as a node of its own — name, ports,
// epmd, Erlang cookie, data — never the machine's shared 5672 node. What the RabbitMQ adapter builds on is checked
// here against the running node: a persistent message in a quorum queue, confirmed, outlives a restart.
let stack: PrivateStack;
let rabbitmq: PrivateServer;
let client: AMQPBaseClient | null = null;

before(async () => {
  stack = await startPrivateStack({ rabbitmq: true });
  rabbitmq = stack.rabbitmq!;
});

after(async () => {
  await client?.close().catch(() => {});
  await stack?.stop();
});

test('POSTBOX_BROKER=rabbitmq selects RabbitMQ', () => {
  assert.equal(chosenBroker({ POSTBOX_BROKER: 'RabbitMQ' }), 'rabbitmq');
});

test('the private RabbitMQ answers AMQP 0-9-1; a confirmed persistent message in a quorum queue outlives a restart of the node', async () => {
  await rabbitmqAnswers(rabbitmq.url);
  assert.ok(!rabbitmq.url.includes(':5672'), `not the machine's node: ${rabbitmq.url}`);
  client = await new AMQPClient(rabbitmq.url).connect();
  const ch = await client.channel();
  await ch.confirmSelect();
  await ch.queueDeclare('durable-check', { durable: true }, { 'x-queue-type': 'quorum' });
  await ch.basicPublish('', 'durable-check', 'kept', { deliveryMode: 2, messageId: 'm-1' }, true);
  await client.close();
  client = null;
  // A stop and a start of the node (after kill -9 the quorum queue answered with a Raft timeout for over a
  // minute here: not yet understood, so not claimed; issue 22's note).
  await rabbitmq.stop();
  const { port } = new URL(rabbitmq.url);
  await waitFor('the node’s port to be free', async () => !(await accepts(Number(port))), 30_000, 100);
  await restart(rabbitmq);
  client = await new AMQPClient(rabbitmq.url).connect();
  const again = await client.channel();
  const message = await again.basicGet('durable-check', { noAck: true });
  assert.equal(message?.bodyToString(), 'kept');
  assert.equal(message?.properties.messageId, 'm-1');
});

test('the node, its distribution port and its epmd listen on the loopback interface only', async () => {
  const pid = await rabbitmq.pid();
  assert.ok(pid !== undefined, 'the node runs');
  const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  const epmdPort = args[args.indexOf('-epmd_port') + 1];
  assert.ok(epmdPort, `the node names its epmd port: ${args.join(' ')}`);
  const listening = spawnSync('ss', ['-ltnpH'], { encoding: 'utf8' })
    .stdout.split('\n')
    .filter((line) => line.includes(`pid=${pid},`) || line.split(/\s+/)[3]?.endsWith(`:${epmdPort}`));
  // AMQP, distribution, epmd.
  assert.ok(listening.length >= 3, listening.join('\n'));
  for (const line of listening) assert.match(line.split(/\s+/)[3] ?? '', /^(127\.0\.0\.1|\[::1\]):\d+$/, line);
});
