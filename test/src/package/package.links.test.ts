// How the CLI finds its links without the development stack: the variables set, the stack's local addresses only
// inside the repository, and an error naming the variable when a command needs one that is not set.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readConfig } from '@postbox/api';
import { ConfigError } from '@postbox/engine';
import { chosenBroker, STACK_BROKERS, stackEnv } from '@postbox/stack';
import { BROKER_KINDS, brokerKind, linkEnv, requireLink } from '../../../packages/api/src/config/links.ts';

test('the CLI and the development stack accept the same brokers, and refuse the same', () => {
  assert.deepEqual([...BROKER_KINDS], [...STACK_BROKERS]);
  for (const value of ['', ' Kafka ', 'NATS', 'rabbitmq'])
    assert.equal(brokerKind({ POSTBOX_BROKER: value }), chosenBroker({ POSTBOX_BROKER: value }));
  assert.throws(
    () => brokerKind({ POSTBOX_BROKER: 'rabit' }),
    (e) => e instanceof ConfigError && /"rabit"/.test(e.message),
  );
});

test('variables that are set win; inside the repository the stack fills the rest', async () => {
  const all = {
    DATABASE_URL: 'postgres://db.example:5432/shop',
    REDIS_URL: 'redis://redis.example:6379',
    KAFKA_BROKERS: 'kafka.example:9092',
    NATS_URL: 'nats://nats.example:4222',
    RABBITMQ_URL: 'amqp://rabbit.example:5672',
  };
  assert.deepEqual(await linkEnv(all), all);
  const filled = await linkEnv({ DATABASE_URL: all.DATABASE_URL });
  assert.equal(filled.DATABASE_URL, all.DATABASE_URL);
  const local = stackEnv();
  assert.equal(filled.KAFKA_BROKERS, local.KAFKA_BROKERS);
  assert.equal(filled.REDIS_URL, local.REDIS_URL);
});

test('a link a command needs and nobody set is a ConfigError naming the variable', () => {
  assert.throws(
    () => requireLink({ DATABASE_URL: '' }, 'DATABASE_URL', 'the URL of your PostgreSQL'),
    (e) => e instanceof ConfigError && /^DATABASE_URL is not set: the URL of your PostgreSQL/.test(e.message),
  );
  const links = {
    DATABASE_URL: 'postgres://h/db',
    REDIS_URL: '',
    KAFKA_BROKERS: '',
    NATS_URL: 'nats://n:4222',
    RABBITMQ_URL: '',
  };
  assert.throws(
    () => readConfig(links, {}),
    (e) => e instanceof ConfigError && /^KAFKA_BROKERS is not set/.test(e.message),
  );
  // Another broker needs no Kafka; no Redis means no durable retry schedule, not an error.
  const nats = readConfig(links, { POSTBOX_BROKER: 'nats' });
  assert.equal(nats.broker.kind, 'nats');
  assert.equal(nats.redisUrl, '');
  assert.throws(
    () => readConfig(links, { POSTBOX_BROKER: 'rabbitmq' }),
    (e) => e instanceof ConfigError && /^RABBITMQ_URL is not set/.test(e.message),
  );
});
