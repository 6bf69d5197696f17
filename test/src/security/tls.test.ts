import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { connect, enqueueMany, type Sql } from '@postbox/engine';
import { migrateDemo } from '@postbox/api/demo';
import { makeCertificateAuthority } from '@postbox/stack';
import { createHandlerTables, TEST_CONSUMER_MODULE } from '../support/consumer.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';

// TLS on every link (issue 24): a private PostgreSQL, Redis and Kafka with the stack's TLS material (its own CA,
// a certificate for `localhost`), and one pipeline — migrate, enqueue, `postbox relay`, `postbox consume` with
// durable retries, `postbox verify` — that reaches them only over TLS: PostgreSQL with sslmode=verify-full,
// Kafka over SASL_SSL with a SCRAM user, Redis on its TLS port as an ACL user. Then each link with a CA the
// process does not trust, or dialled by a name the certificate does not carry, stops the command at start with
// an error naming the link.
let stack: PrivateStack;
let brokers: PrivateStack | undefined;
let tls: Record<string, string>;
let sql: Sql;
let otherCa: string;
let scratch: string;
const topic = 'tls.events';
const CONSUMER = 'tls-consumer';
const EVENTS = 300;

before(async () => {
  stack = await startPrivateStack({ postgres: {}, redis: true, kafka: {}, tls: true });
  tls = stack.tlsEnv!;
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'postbox-other-ca-'));
  otherCa = (await makeCertificateAuthority(scratch, 'Some other CA')).caFile;
  sql = connect({ url: tls.DATABASE_URL!, max: 2 });
  // `postbox migrate` over TLS too; then the demo's and the test handler's tables.
  const migrate = postbox(['migrate']);
  assert.equal(await migrate.exited, 0, migrate.output());
  await migrateDemo(sql);
  await createHandlerTables(sql);
});

after(async () => {
  await sql?.end({ timeout: 5 });
  await brokers?.stop();
  await stack?.stop();
  if (scratch) await fs.rm(scratch, { recursive: true, force: true });
});

function postbox(args: string[], env: Record<string, string> = {}): RoleProcess {
  return spawnPostbox(args, {
    ...tls,
    POSTBOX_TOPICS: `${topic}:2`,
    TEST_TOPIC: topic,
    TEST_CONSUMER: CONSUMER,
    TEST_RETRY: JSON.stringify({ baseMs: 100, capMs: 200 }),
    LOG_LEVEL: 'warn',
    ...env,
  });
}

/** The exit code of a command that must stop by itself; one still running after 30 s is killed and fails. */
async function exitCode(p: RoleProcess): Promise<number | null> {
  const timer = setTimeout(() => p.kill('SIGKILL'), 30_000);
  try {
    const code = await p.exited;
    assert.notEqual(p.child.signalCode, 'SIGKILL', `still running after 30 s:\n${p.output().slice(-2000)}`);
    return code;
  } finally {
    clearTimeout(timer);
  }
}

async function stop(p: RoleProcess): Promise<void> {
  p.kill('SIGTERM');
  assert.equal(await p.exited, 0, p.output().slice(-3000));
}

test('one pipeline over TLS: PostgreSQL verify-full, Kafka SASL_SSL + SCRAM, Redis TLS + ACL; the verifier passes', async () => {
  // Every tenth event fails its first attempt: its retry goes through the ledger and Redis (BullMQ) over TLS.
  await sql.begin((tx) =>
    enqueueMany(
      tx,
      Array.from({ length: EVENTS }, (_, i) => ({
        aggregate_id: `order-${i % 30}`,
        aggregate_version: Math.floor(i / 30) + 1,
        event_type: 'TestEvent',
        data: i % 10 === 0 ? { failAttempts: 1 } : { n: i },
      })),
      { topic, producer: 'tls-test' },
    ),
  );
  const relay = postbox(['relay']);
  const consumer = postbox(['consume', TEST_CONSUMER_MODULE]);
  try {
    await waitFor(
      'every event applied',
      async () => {
        const [row] = await sql<
          { n: number }[]
        >`SELECT count(*)::int AS n FROM test_applied WHERE consumer = ${CONSUMER}`;
        return row!.n === EVENTS;
      },
      120_000,
    ).catch((cause: unknown) => {
      throw new Error(
        `${(cause as Error).message}\nrelay:\n${relay.output().slice(-2000)}\nconsumer:\n${consumer.output().slice(-2000)}`,
        { cause },
      );
    });
    // The servers' side of it: every Postbox connection to PostgreSQL is TLS, and Redis serves the ACL user on
    // its TLS port.
    const sessions = await sql<{ application_name: string; ssl: boolean }[]>`
      SELECT a.application_name, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
      WHERE a.application_name LIKE 'postbox%'`;
    assert.ok(sessions.length >= 2, JSON.stringify(sessions));
    assert.deepEqual(
      sessions.filter((s) => !s.ssl),
      [],
      'no connection in clear',
    );
    const clients = await redisClients();
    assert.ok(
      clients.some((c) => c.user === 'postbox' && c.laddr.endsWith(`:${stack.tlsPorts!.redis}`)),
      JSON.stringify(clients),
    );
  } finally {
    await stop(relay);
    await stop(consumer);
  }
  const [retried] = await sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM message_retry WHERE consumer_name = ${CONSUMER} AND status = 'done'`;
  assert.equal(retried!.n, EVENTS / 10, 'the failed first attempts were retried through Redis');
  const effects = 'SELECT order_id AS aggregate_id, version, applied_count FROM demo_order_projection';
  const verify = postbox(['verify', '--final', '--consumer', CONSUMER, '--effects-counts', effects]);
  assert.equal(await verify.exited, 0, verify.output());
  assert.match(verify.output(), new RegExp(`applied ${EVENTS},[\\s\\S]*lost 0, applied twice 0, out of order 0`));
  for (const line of verify.output().trim().split('\n')) console.log(`# TLS verifier: ${line}`);
});

test('a CA the process does not trust, or a host name the certificate does not carry, names the link at start', async () => {
  const dialled = (url: string) => url.replace('//localhost:', '//127.0.0.1:').replace('@localhost:', '@127.0.0.1:');
  const cases: Array<[string, Record<string, string>, RegExp]> = [
    [
      'PostgreSQL, another CA',
      { DATABASE_URL: tls.DATABASE_URL!.replace(/sslrootcert=[^&]+/, `sslrootcert=${otherCa}`) },
      /PostgreSQL link \(postgres:\/\/localhost:\d+\): TLS: the server's certificate is not signed by a CA this process trusts .*DATABASE_URL/,
    ],
    [
      'PostgreSQL, dialled by IP',
      { DATABASE_URL: dialled(tls.DATABASE_URL!) },
      /PostgreSQL link \(postgres:\/\/127\.0\.0\.1:\d+\): TLS: the server's certificate is not issued for the host dialled/,
    ],
    [
      'Kafka, another CA',
      { KAFKA_SSL_CA: otherCa },
      /Kafka link \(localhost:\d+\): TLS: the server's certificate is not signed by a CA this process trusts .*KAFKA_SSL_CA/,
    ],
    [
      'Kafka, dialled by IP',
      { KAFKA_BROKERS: tls.KAFKA_BROKERS!.replace('localhost', '127.0.0.1') },
      /Kafka link \(127\.0\.0\.1:\d+\): TLS: the server's certificate is not issued for the host dialled/,
    ],
    [
      'Redis, another CA',
      { REDIS_URL: tls.REDIS_URL!.replace(/sslrootcert=[^&]+/, `sslrootcert=${otherCa}`) },
      /Redis link \(rediss:\/\/localhost:\d+\): TLS: the server's certificate is not signed by a CA this process trusts .*REDIS_URL/,
    ],
    [
      'Redis, wrong password',
      { REDIS_URL: tls.REDIS_URL!.replace(/:[^:@/]+@/, ':not-the-password@') },
      /Redis link \(rediss:\/\/localhost:\d+\): WRONGPASS/,
    ],
  ];
  for (const [name, env, expected] of cases) {
    const p = postbox(['consume', TEST_CONSUMER_MODULE], env);
    const code = await exitCode(p);
    assert.notEqual(code, 0, `${name}: the command must not start`);
    assert.match(p.output(), expected, `${name}:\n${p.output().slice(-2000)}`);
    assert.doesNotMatch(p.output(), /not-the-password|\s+at .*\.ts:\d+/, `${name}: no secret, no stack trace`);
  }
});

/** CLIENT LIST over the TLS link, as the ACL user. */
async function redisClients(): Promise<Array<{ user: string; laddr: string }>> {
  const { redisConnection } = await import('@postbox/engine/bullmq');
  const redis = redisConnection(tls.REDIS_URL!);
  try {
    const list = (await redis.client('LIST')) as string;
    return list
      .trim()
      .split('\n')
      .map((line) => Object.fromEntries(line.split(' ').map((kv) => kv.split('=') as [string, string])))
      .map((c) => ({ user: c.user ?? '', laddr: c.laddr ?? '' }));
  } finally {
    redis.disconnect();
  }
}

test('NATS (TLS required) and RabbitMQ (AMQPS): the relay and a consumer through each over TLS; a wrong CA names the link', async () => {
  brokers = await startPrivateStack({ nats: true, rabbitmq: true, tls: true });
  const env = brokers.tlsEnv!;
  const effects = 'SELECT order_id AS aggregate_id, version, applied_count FROM demo_order_projection';
  for (const broker of ['nats', 'rabbitmq'] as const) {
    const brokerTopic = `tls.${broker}`;
    const consumerName = `tls-${broker}`;
    const brokerEnv = {
      POSTBOX_BROKER: broker,
      POSTBOX_TOPICS: `${brokerTopic}:2`,
      TEST_TOPIC: brokerTopic,
      TEST_CONSUMER: consumerName,
      ...(broker === 'nats' ? { NATS_URL: env.NATS_URL!, NATS_TLS_CA: env.NATS_TLS_CA! } : {}),
      ...(broker === 'rabbitmq' ? { RABBITMQ_URL: env.RABBITMQ_URL! } : {}),
    };
    await sql`DELETE FROM demo_order_projection`;
    await sql.begin((tx) =>
      enqueueMany(
        tx,
        Array.from({ length: 60 }, (_, i) => ({
          aggregate_id: `${broker}-${i % 6}`,
          aggregate_version: Math.floor(i / 6) + 1,
          event_type: 'TestEvent',
          data: { n: i },
        })),
        { topic: brokerTopic, producer: 'tls-test' },
      ),
    );
    // RabbitMQ routes only to queues that exist (it keeps no log): the consumer declares its group's first.
    const consumer = postbox(['consume', TEST_CONSUMER_MODULE], brokerEnv);
    await waitFor('the consumer started', async () => consumer.output().includes(`postbox consume: ${consumerName}`));
    const relay = postbox(['relay'], brokerEnv);
    try {
      await waitFor(`every event applied through ${broker}`, async () => {
        const [row] = await sql<{ n: number }[]>`
          SELECT count(*)::int AS n FROM test_applied WHERE consumer = ${consumerName}`;
        return row!.n === 60;
      }).catch((cause: unknown) => {
        throw new Error(
          `${(cause as Error).message}\nrelay:\n${relay.output().slice(-2000)}\nconsumer:\n${consumer.output().slice(-2000)}`,
          { cause },
        );
      });
    } finally {
      await stop(relay);
      await stop(consumer);
    }
    const verify = postbox(['verify', '--final', '--consumer', consumerName, '--effects-counts', effects], brokerEnv);
    assert.equal(await verify.exited, 0, verify.output());
    assert.match(verify.output(), /applied 60,[\s\S]*lost 0, applied twice 0, out of order 0/);
    console.log(`# ${broker} over TLS: ${verify.output().trim().split('\n').at(-1)}`);

    const wrongCa =
      broker === 'nats'
        ? { NATS_TLS_CA: otherCa }
        : { RABBITMQ_URL: env.RABBITMQ_URL!.replace(/sslrootcert=[^&]+/, `sslrootcert=${otherCa}`) };
    const refused = postbox(['consume', TEST_CONSUMER_MODULE], { ...brokerEnv, ...wrongCa });
    assert.notEqual(await exitCode(refused), 0);
    const name = broker === 'nats' ? 'NATS' : 'RabbitMQ';
    assert.match(
      refused.output(),
      new RegExp(
        `${name} link \\(.*localhost:\\d+\\): TLS: the server's certificate is not signed by a CA this process trusts`,
      ),
      refused.output(),
    );
  }
});
