import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { connect, type Sql } from '@postbox/engine';
import { connectNats, durableName, NatsOffsets, streamName } from '@postbox/engine/nats';
import { migrateDemo } from '@postbox/api/demo';
import { natsPermissionsFile, natsTlsUrl } from '@postbox/stack';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import {
  appliedTwice,
  createHandlerTables,
  enqueueTestEvents,
  TEST_CONSUMER_MODULE,
  waitForApplied,
} from '../support/consumer.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';

// Least privilege on NATS JetStream (issue 45, seed §20): a private TLS-only NATS with a user per role.
// `postbox migrate --broker-acls --broker-file` writes the roles' permissions into the server's include and the
// server reloads it; then a relay and a consumer run on their own users alone, and each user is refused what its
// role never does — as an attacker holding that user's password would try it.
let stack: PrivateStack;
let sql: Sql;
let admin: Record<string, string>;
let ca: string;
const topic = 'perm.events';
const CONSUMER = 'perm-consumer';
const GROUP = `postbox.${CONSUMER}`;
const EVENTS = 60;

before(async () => {
  stack = await startPrivateStack({ postgres: {}, redis: true, nats: true, tls: true });
  admin = { ...stack.tlsEnv!, POSTBOX_BROKER: 'nats' };
  ca = fs.readFileSync(admin.NATS_TLS_CA!, 'utf8');
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

function roleUrl(role: 'relay' | 'consumer' | 'api'): string {
  return natsTlsUrl(Number(new URL(admin.NATS_URL!).port), stack.tlsMaterial!, role);
}

function roleEnv(role: 'relay' | 'consumer' | 'api'): Record<string, string> {
  return { ...admin, NATS_URL: roleUrl(role) };
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

/** What a call as the role's user (or the admin's, null) ends with: 'ok' or its error's message. */
async function asUser<T>(
  role: 'relay' | 'consumer' | 'api' | null,
  call: (nc: Awaited<ReturnType<typeof connectNats>>) => Promise<T>,
): Promise<string> {
  const nc = await connectNats({ servers: [role ? roleUrl(role) : admin.NATS_URL!], tls: { ca } });
  try {
    await call(nc);
    return 'ok';
  } catch (cause) {
    return (cause as Error).message;
  } finally {
    await nc.close();
  }
}

/** The messages a partition stream holds, read as the admin. */
async function storedIn(partition: number): Promise<number> {
  const nc = await connectNats({ servers: [admin.NATS_URL!], tls: { ca } });
  try {
    return (await (await jetstreamManager(nc)).streams.info(streamName(topic, partition))).state.messages;
  } finally {
    await nc.close();
  }
}

const denied = (subject: string) => `Permissions Violation for Publish to "${subject}"`;

test('postbox migrate --broker-acls --broker-file writes the roles NATS permissions, idempotently; the server reloads them', async () => {
  const file = natsPermissionsFile(stack.nats!.home);
  assert.match(await asUser('relay', (nc) => jetstreamManager(nc)), /Permissions Violation/, 'no grant before');
  const first = postbox(['migrate', '--roles', '--broker-acls', '--broker-file', file, TEST_CONSUMER_MODULE], admin);
  assert.equal(await first.exited, 0, first.output());
  assert.match(first.output(), /broker permissions: postbox-relay, postbox-consumer, postbox-api — .* written/);
  const again = postbox(['migrate', '--broker-acls', '--broker-file', file, TEST_CONSUMER_MODULE], admin);
  assert.equal(await again.exited, 0, again.output());
  assert.match(again.output(), / unchanged; /, 'running it twice changes nothing');
  const print = postbox(['migrate', '--print', TEST_CONSUMER_MODULE], admin);
  assert.equal(await print.exited, 0, print.output());
  assert.match(print.output(), /publish = \{ allow = \[.*"perm\.events\.1"\] \}/);
  assert.match(print.output(), /"\$JS\.API\.CONSUMER\.MSG\.NEXT\.PB_perm_events_0\.\*"/);
  await stack.nats!.signal('SIGHUP');
  await waitFor('the relay user allowed its API calls', async () => {
    return (await asUser('relay', (nc) => jetstreamManager(nc))) === 'ok';
  });
});

test('a relay and a consumer run on their own NATS users alone: every event applied once', async () => {
  await enqueueTestEvents(sql, topic, EVENTS, 'perm-test');
  const logStart = fs.statSync(stack.nats!.logFile).size;
  const relay = postbox(['relay'], roleEnv('relay'));
  let consumer: RoleProcess | undefined;
  try {
    // The relay makes the streams; a consumer's user may not (a stream made with other subjects would capture
    // them), and until they exist it would ask again and again.
    await waitFor('the relay made the streams', async () => (await storedIn(1).catch(() => -1)) >= 0);
    consumer = postbox(['consume', TEST_CONSUMER_MODULE], roleEnv('consumer'));
    await waitForApplied(sql, CONSUMER, EVENTS, { relay, consumer });
  } finally {
    for (const p of consumer ? [relay, consumer] : [relay]) {
      p.kill('SIGTERM');
      assert.equal(await p.exited, 0, p.output().slice(-3000));
    }
  }
  assert.equal(await appliedTwice(sql, CONSUMER), 0, 'nothing applied twice');
  // Every call the relay and the consumer made was within their grants: the server refused none.
  const log = fs.readFileSync(stack.nats!.logFile, 'utf8').slice(logStart);
  assert.deepEqual(
    log.split('\n').filter((l) => /Violation/i.test(l)),
    [],
  );
});

test("each role's NATS user is refused what its role never does; the API's reads lag", async () => {
  const stream = streamName(topic, 0);
  const before = await storedIn(0);
  const send = (nc: Awaited<ReturnType<typeof connectNats>>) =>
    jetstream(nc).publish(`${topic}.0`, 'attack', { timeout: 3000 });
  assert.equal(await asUser('consumer', send), denied(`${topic}.0`), 'consumer: publishing to a partition subject');
  assert.equal(await asUser('api', send), denied(`${topic}.0`), 'api: publishing to a partition subject');
  assert.equal(await storedIn(0), before, 'nothing stored by a refused publish');

  // The group's durable on the stream, by the admin: the relay may not look at it, pull from it or subscribe to
  // what it delivers.
  const durable = await asUser(null, async (nc) => {
    for await (const c of (await jetstreamManager(nc)).consumers.list(stream))
      if (c.name.startsWith(`${durableName(GROUP)}__`)) throw new Error(c.name);
  });
  assert.match(durable, /__\d+$/, 'the group has a durable');
  const next = `$JS.API.CONSUMER.MSG.NEXT.${stream}.${durable}`;
  assert.equal(
    await asUser('relay', (nc) => nc.request(next, JSON.stringify({ batch: 1 }), { timeout: 3000 })),
    denied(next),
    "relay: pulling from the consumer group's durable",
  );
  const info = `$JS.API.CONSUMER.INFO.${stream}.${durable}`;
  assert.equal(
    await asUser('relay', async (nc) => (await jetstreamManager(nc)).consumers.info(stream, durable)),
    denied(info),
    "relay: the durable's state",
  );
  const subscribe = async (nc: Awaited<ReturnType<typeof connectNats>>, subject: string) => {
    const sub = nc.subscribe(subject);
    await nc.flush();
    for await (const _ of sub) break;
  };
  for (const subject of [`${topic}.0`, '_INBOX_postbox-consumer.>', '_INBOX.>'])
    assert.equal(
      await asUser('relay', (nc) => subscribe(nc, subject)),
      `Permissions Violation for Subscription to "${subject}"`,
      `relay: subscribing to ${subject}`,
    );
  const create = `$JS.API.CONSUMER.CREATE.${stream}.thief`;
  for (const role of ['relay', 'api'] as const)
    assert.equal(
      await asUser(role, async (nc) =>
        (await jetstreamManager(nc)).consumers.add(stream, { durable_name: 'thief', ack_policy: AckPolicy.All }),
      ),
      denied(create),
      `${role}: making a durable of its own`,
    );

  // The control plane's reads, as the API's user: every partition read to its end.
  const offsets = new NatsOffsets({ servers: [roleUrl('api')], tls: { ca } });
  try {
    const positions = await offsets.positions(GROUP, [topic]);
    assert.equal(positions.length, 2);
    for (const p of positions) assert.equal(p.committed, p.high, `partition ${p.partition} read to its end`);
    assert.equal((await offsets.retention([topic]))[0]!.retentionMs, null);
  } finally {
    await offsets.close();
  }
});
