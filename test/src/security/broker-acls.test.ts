import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { connect, type Sql } from '@postbox/engine';
import { migrateDemo } from '@postbox/api/demo';
import { kafkaTlsEnv } from '@postbox/stack';
import { Kafka, logLevel } from 'kafkajs';
import {
  appliedTwice,
  createHandlerTables,
  enqueueTestEvents,
  TEST_CONSUMER_MODULE,
  waitForApplied,
} from '../support/consumer.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { spawnPostbox, type RoleProcess } from '../support/processes.ts';

// Least privilege on the broker (issue 45, seed §20): a private Kafka whose SASL_SSL listener runs the authorizer,
// with a SCRAM user per role. `postbox migrate --broker-acls` grants the relay WRITE on its topics, the consumer
// READ on its topics and group, the API DESCRIBE; then each user is refused what its role never does — as an
// attacker holding that user's password would try it — and a relay and a consumer run on their own users alone.
let stack: PrivateStack;
let sql: Sql;
let admin: Record<string, string>;
const topic = 'acl.events';
const other = 'acl.other';
const CONSUMER = 'acl-consumer';
const GROUP = `postbox.${CONSUMER}`;
const EVENTS = 60;

before(async () => {
  stack = await startPrivateStack({ postgres: {}, redis: true, kafka: {}, tls: true });
  admin = stack.tlsEnv!;
  sql = connect({ url: admin.DATABASE_URL!, max: 2 });
  const migrate = postbox(['migrate'], admin);
  assert.equal(await migrate.exited, 0, migrate.output());
  await migrateDemo(sql);
  await createHandlerTables(sql);
  const kafka = client(admin).admin();
  await kafka.connect();
  try {
    await kafka.createTopics({
      waitForLeaders: true,
      topics: [
        { topic, numPartitions: 2 },
        { topic: other, numPartitions: 1 },
      ],
    });
  } finally {
    await kafka.disconnect();
  }
});

after(async () => {
  await sql?.end({ timeout: 5 });
  await stack?.stop();
});

function roleEnv(role: 'relay' | 'consumer' | 'api'): Record<string, string> {
  return { ...admin, ...kafkaTlsEnv(stack.tlsPorts!.kafka!, stack.tlsMaterial!, role) };
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

/** A kafkajs client logged in as the environment's SASL user. */
function client(env: Record<string, string>): Kafka {
  return new Kafka({
    clientId: 'acl-test',
    brokers: [env.KAFKA_BROKERS!],
    ssl: { ca: [fs.readFileSync(env.KAFKA_SSL_CA!, 'utf8')] },
    sasl: { mechanism: 'scram-sha-256', username: env.KAFKA_SASL_USERNAME!, password: env.KAFKA_SASL_PASSWORD! },
    retry: { retries: 8, initialRetryTime: 200, maxRetryTime: 1000 },
    logLevel: logLevel.NOTHING,
  });
}

/** The Kafka error type a call failed with (null: it succeeded). */
async function refusal(call: () => Promise<unknown>): Promise<string | null> {
  try {
    await call();
    return null;
  } catch (cause) {
    const e = cause as { type?: string; cause?: { type?: string }; message?: string };
    return e.type ?? e.cause?.type ?? e.message ?? String(cause);
  }
}

/** Sends one record as the environment's user; an attacker's producer is not idempotent (no cluster grant asked). */
async function produceAs(env: Record<string, string>, to: string, idempotent = false): Promise<string | null> {
  const producer = client(env).producer({ idempotent, maxInFlightRequests: 1 });
  try {
    return await refusal(async () => {
      await producer.connect();
      await producer.send({ topic: to, acks: -1, messages: [{ key: 'k', value: 'attack' }] });
    });
  } finally {
    await producer.disconnect();
  }
}

async function groupOffsetsAs(env: Record<string, string>): Promise<string | null> {
  const a = client(env).admin();
  await a.connect();
  try {
    return await refusal(() => a.fetchOffsets({ groupId: GROUP, topics: [topic] }));
  } finally {
    await a.disconnect();
  }
}

test('postbox migrate --broker-acls grants each role its least, idempotently, and --print shows it', async () => {
  const first = postbox(['migrate', '--roles', '--broker-acls', TEST_CONSUMER_MODULE], admin);
  assert.equal(await first.exited, 0, first.output());
  assert.match(
    first.output(),
    /broker ACLs: 8 for User:postbox-relay, User:postbox-consumer, User:postbox-api — 8 created, 0 removed/,
  );
  const again = postbox(['migrate', '--broker-acls', TEST_CONSUMER_MODULE], admin);
  assert.equal(await again.exited, 0, again.output());
  assert.match(again.output(), /— 0 created, 0 removed/, 'running it twice changes nothing');
  const print = postbox(['migrate', '--print', TEST_CONSUMER_MODULE], admin);
  assert.equal(await print.exited, 0, print.output());
  assert.match(print.output(), /--allow-principal User:postbox-relay --operation WRITE --topic acl\.events/);
  assert.match(
    print.output(),
    /--allow-principal User:postbox-consumer --operation READ --group postbox\.acl-consumer/,
  );
});

test('a relay and a consumer run on their own users alone: every event applied once', async () => {
  await enqueueTestEvents(sql, topic, EVENTS, 'acl-test');
  const relay = postbox(['relay'], roleEnv('relay'));
  const consumer = postbox(['consume', TEST_CONSUMER_MODULE], roleEnv('consumer'));
  try {
    await waitForApplied(sql, CONSUMER, EVENTS, { relay, consumer });
  } finally {
    for (const p of [relay, consumer]) {
      p.kill('SIGTERM');
      assert.equal(await p.exited, 0, p.output().slice(-3000));
    }
  }
  assert.equal(await appliedTwice(sql, CONSUMER), 0, 'nothing applied twice');
});

test("each role's user is refused what its role never does", async () => {
  // kafkajs reports a FindCoordinator refused with GROUP_AUTHORIZATION_FAILED as a coordinator it could not find
  // (it tries each broker and drops their errors); the API's identical call succeeding below is the contrast.
  const denied = { topic: 'TOPIC_AUTHORIZATION_FAILED', group: 'Failed to find group coordinator' };
  assert.equal(await produceAs(roleEnv('consumer'), topic), denied.topic, 'consumer: writing its own topic');
  assert.equal(await produceAs(roleEnv('api'), topic), denied.topic, 'api: writing a topic');
  assert.equal(await produceAs(roleEnv('relay'), other), denied.topic, 'relay: writing a topic not its own');
  assert.equal(await groupOffsetsAs(roleEnv('relay')), denied.group, "relay: reading the consumer group's offsets");
  assert.equal(await produceAs(roleEnv('relay'), topic, true), null, 'relay: writing its topic, idempotently');
  assert.equal(
    await produceAs(roleEnv('consumer'), topic, true),
    'CLUSTER_AUTHORIZATION_FAILED',
    'consumer: an idempotent producer',
  );
  assert.equal(await groupOffsetsAs(admin), null, "the admin user: the group's offsets");
  assert.equal(await groupOffsetsAs(roleEnv('api')), null, "api: the group's offsets, for lag");
  // A consumer reading under another group's name.
  const thief = client(roleEnv('consumer')).consumer({ groupId: 'postbox.someone-else' });
  await thief.connect();
  try {
    const joined = await refusal(async () => {
      await thief.subscribe({ topic, fromBeginning: true });
      await new Promise<void>((resolve, reject) => {
        thief.on(thief.events.CRASH, (e) => reject(e.payload.error));
        void thief.run({ eachMessage: async () => resolve() }).catch(reject);
        setTimeout(() => resolve(), 15_000).unref();
      });
    });
    assert.equal(joined, denied.group, 'consumer: joining another group');
  } finally {
    await thief.disconnect();
  }
});
