import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { connect, type Sql } from '@postbox/engine';
import { closeRabbit, connectRabbit, queueName, RabbitOffsets } from '@postbox/engine/rabbitmq';
import { migrateDemo } from '@postbox/api/demo';
import { rabbitmqctlScript, rabbitmqTlsUrl } from '@postbox/stack';
import {
  appliedTwice,
  createHandlerTables,
  enqueueTestEvents,
  TEST_CONSUMER_MODULE,
  waitForApplied,
} from '../support/consumer.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';

// Least privilege on RabbitMQ (issue 45, seed §20): a private node with a user per role and no permission yet.
// `postbox migrate --broker-acls --broker-file` writes the roles' `rabbitmqctl set_permissions` commands, which
// the test runs on the node; then a relay and a consumer run on their own users alone, and each user is refused
// what its role never does — as an attacker holding that user's password would try it.
let stack: PrivateStack;
let sql: Sql;
let admin: Record<string, string>;
const run = promisify(execFile);
const topic = 'perm.events';
const CONSUMER = 'perm-consumer';
const GROUP = `postbox.${CONSUMER}`;
const EVENTS = 60;

before(async () => {
  stack = await startPrivateStack({ postgres: {}, redis: true, rabbitmq: true, tls: true });
  admin = { ...stack.tlsEnv!, POSTBOX_BROKER: 'rabbitmq' };
  sql = connect({ url: admin.DATABASE_URL!, max: 2 });
  const migrate = postbox(['migrate'], admin);
  assert.equal(await migrate.exited, 0, migrate.output());
  await migrateDemo(sql);
  await createHandlerTables(sql);
});

after(async () => {
  await sql?.end({ timeout: 5 });
  await stack?.stop();
});

type Role = 'relay' | 'consumer' | 'api';

function roleUrl(role: Role): string {
  return rabbitmqTlsUrl(stack.tlsPorts!.rabbitmq!, stack.tlsMaterial!, role);
}

function postbox(args: string[], env: Record<string, string>): RoleProcess {
  return spawnPostbox(args, {
    ...env,
    POSTBOX_TOPICS: `${topic}:2`,
    TEST_TOPIC: topic,
    TEST_CONSUMER: CONSUMER,
    LOG_LEVEL: 'warn',
  });
}

/** What a call on a channel as the role's user (or the admin's, null) ends with: 'ok' or its error's message. */
async function asUser(
  role: Role | null,
  call: (ch: Awaited<ReturnType<Awaited<ReturnType<typeof connectRabbit>>['channel']>>) => Promise<unknown>,
): Promise<string> {
  try {
    const connection = await connectRabbit(role ? roleUrl(role) : admin.RABBITMQ_URL!);
    try {
      await call(await connection.channel());
      return 'ok';
    } finally {
      await closeRabbit(connection);
    }
  } catch (cause) {
    return (cause as Error).message;
  }
}

/** Messages ready in the group's queue of partition p, as the admin sees them. */
async function ready(p: number): Promise<number> {
  const connection = await connectRabbit(admin.RABBITMQ_URL!);
  try {
    return (await (await connection.channel()).queueDeclare(queueName(topic, GROUP, p), { passive: true }))
      .messageCount;
  } finally {
    await closeRabbit(connection);
  }
}

async function rabbitmqctl(args: string[]): Promise<string> {
  return (await run(rabbitmqctlScript(stack.rabbitmq!.home), ['-q', ...args])).stdout;
}

test('postbox migrate --broker-acls --broker-file writes the roles RabbitMQ permissions, idempotently', async () => {
  assert.match(await asUser('relay', async () => {}), /access to vhost '\/' refused/, 'no permission before');
  const file = path.join(stack.home, 'rabbitmq-permissions.sh');
  const first = postbox(['migrate', '--roles', '--broker-acls', '--broker-file', file, TEST_CONSUMER_MODULE], admin);
  assert.equal(await first.exited, 0, first.output());
  assert.match(first.output(), /broker permissions: postbox-relay, postbox-consumer, postbox-api — .* written/);
  const again = postbox(['migrate', '--broker-acls', '--broker-file', file, TEST_CONSUMER_MODULE], admin);
  assert.equal(await again.exited, 0, again.output());
  assert.match(again.output(), / unchanged; /, 'running it twice changes nothing');
  const print = postbox(['migrate', '--print', TEST_CONSUMER_MODULE], admin);
  assert.equal(await print.exited, 0, print.output());
  assert.match(print.output(), /rabbitmqctl set_permissions -p \/ postbox-relay '\^\(perm\\\.events\)\$'/);
  // The script as an operator runs it on a node: `rabbitmqctl` found on the PATH.
  const bin = path.dirname(rabbitmqctlScript(stack.rabbitmq!.home));
  await run('sh', [file], { env: { ...process.env, PATH: `${bin}:${process.env.PATH}` } });
  const granted = JSON.parse(await rabbitmqctl(['list_permissions', '-p', '/', '--formatter', 'json'])) as Array<{
    user: string;
    configure: string;
    write: string;
    read: string;
  }>;
  assert.deepEqual(
    granted.filter((g) => g.user.startsWith('postbox-')).sort((a, b) => a.user.localeCompare(b.user)),
    [
      { user: 'postbox-api', configure: '^$', write: '^$', read: '^$' },
      {
        user: 'postbox-consumer',
        configure: '^(perm\\.events:postbox\\.perm\\-consumer:\\d+)$',
        write: '^(perm\\.events:postbox\\.perm\\-consumer:\\d+)$',
        read: '^(perm\\.events|perm\\.events:postbox\\.perm\\-consumer:\\d+)$',
      },
      { user: 'postbox-relay', configure: '^(perm\\.events)$', write: '^(perm\\.events)$', read: '^$' },
    ],
  );
});

test('a relay and a consumer run on their own RabbitMQ users alone: every event applied once', async () => {
  // RabbitMQ routes only to queues that exist, and only a consumer's user may declare its group's: the relay
  // declares the exchange, the consumer (which may only check that it is there) its queues, then events are written.
  const relay = postbox(['relay'], { ...admin, RABBITMQ_URL: roleUrl('relay') });
  let consumer: RoleProcess | undefined;
  try {
    await waitFor('the relay declared the exchange', async () => {
      return (await asUser(null, (ch) => ch.exchangeDeclare(topic, 'direct', { passive: true }))) === 'ok';
    });
    consumer = postbox(['consume', TEST_CONSUMER_MODULE], { ...admin, RABBITMQ_URL: roleUrl('consumer') });
    await waitFor('the consumer declared its queues', async () => (await ready(1).catch(() => -1)) >= 0);
    await enqueueTestEvents(sql, topic, EVENTS, 'perm-test');
    await waitForApplied(sql, CONSUMER, EVENTS, { relay, consumer });
  } finally {
    for (const p of consumer ? [relay, consumer] : [relay]) {
      p.kill('SIGTERM');
      assert.equal(await p.exited, 0, p.output().slice(-3000));
    }
  }
  assert.equal(await appliedTwice(sql, CONSUMER), 0, 'nothing applied twice');
});

test("each role's RabbitMQ user is refused what its role never does; the API's reads lag", async () => {
  const refused = (what: string, user: string) =>
    new RegExp(`ACCESS_REFUSED - access to ${what} in vhost '/' refused for user '${user}'`);
  const publish = async (ch: Parameters<Parameters<typeof asUser>[1]>[0]) => {
    await ch.confirmSelect();
    await ch.basicPublish(topic, '0', 'attack', { deliveryMode: 2 });
  };
  assert.match(await asUser('consumer', publish), refused(`exchange '${topic}'`, 'postbox-consumer'));
  assert.match(await asUser('api', publish), refused(`exchange '${topic}'`, 'postbox-api'));
  assert.equal(await ready(0), 0, 'nothing routed by a refused publish');

  const queue = queueName(topic, GROUP, 0);
  const consume = (ch: Parameters<Parameters<typeof asUser>[1]>[0]) => ch.basicConsume(queue, {}, () => {});
  assert.match(await asUser('relay', consume), refused(`queue '${queue}'`, 'postbox-relay'));
  assert.match(await asUser('api', consume), refused(`queue '${queue}'`, 'postbox-api'));
  const siphon = 'perm.events:postbox.thief:0';
  for (const role of ['relay', 'consumer'] as const)
    assert.match(
      await asUser(role, (ch) => ch.queueDeclare(siphon, { durable: true })),
      refused(`queue '${siphon}'`, `postbox-${role}`),
      `${role}: a queue of a group not its own`,
    );
  assert.match(
    await asUser('consumer', (ch) => ch.exchangeDelete(topic)),
    refused(`exchange '${topic}'`, 'postbox-consumer'),
    'consumer: deleting the exchange',
  );

  // The control plane's reads, as the API's user: every queue drained.
  const offsets = new RabbitOffsets({ url: roleUrl('api'), partitions: new Map([[topic, 2]]) });
  try {
    const positions = await offsets.positions(GROUP, [topic]);
    assert.deepEqual(
      positions.map((p) => [p.partition, p.high]),
      [
        [0, '0'],
        [1, '0'],
      ],
    );
  } finally {
    await offsets.close();
  }
});
