import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { linkEnv, readConfig } from '@postbox/api';
import { ConfigError } from '@postbox/engine';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { spawnPostbox, type RoleProcess } from '../support/processes.ts';
import { stack as localStack } from '../support/stack.ts';

// Links that are silently not secure (issue 45): TLS that does not verify the server, or a password sent in
// clear off this machine, stop every command at start with the link, what is wrong and how to fix it — unless
// POSTBOX_ALLOW_INSECURE names the link, and then each start prints one warning line for it. A plaintext link to
// loopback keeps its password (the local stack's), and a verified TLS link works as before.
let tlsStack: PrivateStack;
let db: TestDatabase;

before(async () => {
  tlsStack = await startPrivateStack({ postgres: {}, tls: true });
  db = await freshDatabase();
  const migrate = spawnPostbox(['migrate'], { DATABASE_URL: tlsStack.tlsEnv!.DATABASE_URL!, LOG_LEVEL: 'warn' });
  assert.equal(await migrate.exited, 0, migrate.output());
});

after(async () => {
  await db?.drop();
  await tlsStack?.stop();
});

/** Links every case starts from: the local stack's (loopback, no TLS), each case overriding some. */
const base = {
  DATABASE_URL: localStack.DATABASE_URL,
  REDIS_URL: localStack.REDIS_URL,
  KAFKA_BROKERS: localStack.KAFKA_BROKERS,
  NATS_URL: 'nats://127.0.0.1:14222',
  RABBITMQ_URL: 'amqp://guest:guest@127.0.0.1:15672',
};

const CASES: Array<[string, Record<string, string>, RegExp]> = [
  [
    'postgres',
    { DATABASE_URL: 'postgres://u:pw@db.internal:5432/shop?sslmode=require' },
    /DATABASE_URL has sslmode=require: the server's certificate is not verified; use sslmode=verify-full with sslrootcert=<CA file> .*POSTBOX_ALLOW_INSECURE=postgres/,
  ],
  [
    'postgres',
    { DATABASE_URL: 'postgres://u:pw@db.internal/shop?sslmode=prefer' },
    /DATABASE_URL has sslmode=prefer: the connection falls back to plaintext/,
  ],
  [
    'postgres',
    { DATABASE_URL: 'postgres://u:pw@db.internal/shop?sslrootcert=/etc/ca.pem' },
    /DATABASE_URL has sslrootcert without sslmode: the server's certificate chain is checked, but not that it was issued for the host dialled/,
  ],
  [
    'postgres',
    { DATABASE_URL_RELAY: 'postgres://relay:pw@db1.internal,db2.internal/shop' },
    /DATABASE_URL_RELAY sends a password without TLS to db1\.internal,db2\.internal; use sslmode=verify-full/,
  ],
  ['postgres', { PGSSLMODE: 'require' }, /PGSSLMODE=require: the server's certificate is not verified/],
  [
    'rabbitmq',
    { POSTBOX_BROKER: 'rabbitmq', RABBITMQ_URL: 'amqps://u:pw@mq.internal/?insecure' },
    /RABBITMQ_URL has \?insecure: the server's certificate is not verified; remove \?insecure.*POSTBOX_ALLOW_INSECURE=rabbitmq/,
  ],
  [
    'rabbitmq',
    { POSTBOX_BROKER: 'rabbitmq', RABBITMQ_URL: 'amqp://u:pw@mq.internal:5672' },
    /RABBITMQ_URL sends a password without TLS to mq\.internal; use amqps:\/\//,
  ],
  [
    'kafka',
    {
      KAFKA_BROKERS: 'k1.internal:9092,k2.internal:9092',
      KAFKA_SASL_MECHANISM: 'plain',
      KAFKA_SASL_USERNAME: 'u',
      KAFKA_SASL_PASSWORD: 'pw',
    },
    /KAFKA_SASL_MECHANISM=plain without KAFKA_SSL sends a password without TLS to k1\.internal,k2\.internal; set KAFKA_SSL=true/,
  ],
  [
    'nats',
    { POSTBOX_BROKER: 'nats', NATS_URL: 'nats://u:pw@n1.internal:4222' },
    /NATS_URL sends a password without TLS to n1\.internal; use tls:\/\/ servers/,
  ],
  [
    'redis',
    { REDIS_URL: 'redis://:pw@cache.internal:6379' },
    /REDIS_URL sends a password without TLS to cache\.internal; use rediss:\/\//,
  ],
];

test('each insecure link is refused where the links are read, naming it, what is wrong and the fix', async () => {
  for (const [link, env, expected] of CASES) {
    await assert.rejects(
      linkEnv({ ...base, ...env }),
      (e: Error) => e instanceof ConfigError && expected.test(e.message) && !e.message.includes(':pw@'),
      `${link}: ${JSON.stringify(env)}`,
    );
  }
});

test('POSTBOX_ALLOW_INSECURE names the links accepted: each is one warning line; an unknown name is refused', async () => {
  for (const [link, env] of CASES) {
    const warnings: string[] = [];
    const links = await linkEnv({ ...base, ...env, POSTBOX_ALLOW_INSECURE: `redis,${link}` }, (l) => warnings.push(l));
    assert.ok(links.DATABASE_URL, link);
    assert.equal(warnings.length, 1, `${link}: ${warnings.join('\n')}`);
    assert.match(
      warnings[0]!,
      new RegExp(`^postbox: WARNING: insecure ${link} link allowed by POSTBOX_ALLOW_INSECURE: `),
    );
  }
  await assert.rejects(
    linkEnv({ ...base, POSTBOX_ALLOW_INSECURE: 'postgres,kafak' }),
    /POSTBOX_ALLOW_INSECURE names "kafak": use a comma list of postgres, kafka, rabbitmq, nats, redis/,
  );
});

test("loopback plaintext keeps its password (the local stack's links); KAFKA_SSL=1 is TLS, a value it cannot read is refused", async () => {
  const warnings: string[] = [];
  const loopback = {
    ...base,
    DATABASE_URL: 'postgres://postbox:postbox@localhost:15432/postbox',
    REDIS_URL: 'redis://:pw@[::1]:16379',
    KAFKA_SASL_MECHANISM: 'plain',
  };
  assert.deepEqual(await linkEnv(loopback, (l) => warnings.push(l)), {
    ...base,
    DATABASE_URL: loopback.DATABASE_URL,
    REDIS_URL: loopback.REDIS_URL,
  });
  assert.deepEqual(warnings, []);
  assert.equal(readConfig(base, { KAFKA_SSL: '1' }).broker.kind, 'kafka');
  const kafka = readConfig(base, { KAFKA_SSL: '1' }).broker;
  assert.equal(kafka.kind === 'kafka' && kafka.kafka.ssl, true, 'KAFKA_SSL=1 is TLS');
  assert.throws(() => readConfig(base, { KAFKA_SSL: 'yes please' }), /KAFKA_SSL must be true or false/);
});

/** The exit code of a command that must stop by itself. */
async function exitCode(p: RoleProcess): Promise<number | null> {
  const timer = setTimeout(() => p.kill('SIGKILL'), 60_000);
  try {
    return await p.exited;
  } finally {
    clearTimeout(timer);
  }
}

test('a command refuses sslmode=require at start, runs with the override and warns; verify-full works as before', async () => {
  const verified = tlsStack.tlsEnv!.DATABASE_URL!;
  assert.match(verified, /sslmode=verify-full/);
  const unverified = verified.replace('sslmode=verify-full', 'sslmode=require');
  const gaps = (env: Record<string, string>) => spawnPostbox(['gaps'], { LOG_LEVEL: 'warn', ...env });

  const refused = gaps({ DATABASE_URL: unverified });
  assert.notEqual(await exitCode(refused), 0, refused.output());
  assert.match(
    refused.output(),
    // With its sslrootcert, postgres.js checks the chain under require, but not the host name.
    /postbox: DATABASE_URL has sslmode=require: the server's certificate chain is checked, but not that it was issued for the host dialled; use sslmode=verify-full .*POSTBOX_ALLOW_INSECURE=postgres/,
  );

  const allowed = gaps({ DATABASE_URL: unverified, POSTBOX_ALLOW_INSECURE: 'postgres' });
  assert.equal(await exitCode(allowed), 0, allowed.output());
  assert.match(
    allowed.output(),
    /postbox: WARNING: insecure postgres link allowed by POSTBOX_ALLOW_INSECURE: DATABASE_URL has sslmode=require/,
  );

  const ok = gaps({ DATABASE_URL: verified });
  assert.equal(await exitCode(ok), 0, ok.output());
  assert.doesNotMatch(ok.output(), /WARNING/);

  // The local stack's loopback link, password and no TLS: as `npm start` and the suite use it.
  const local = gaps({ DATABASE_URL: db.url });
  assert.equal(await exitCode(local), 0, local.output());
  assert.doesNotMatch(local.output(), /WARNING/);
});
