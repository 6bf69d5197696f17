import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { streamName, subjectOf } from '../adapters/nats/streams.ts';
import { queueName } from '../adapters/rabbitmq/topology.ts';
import type { BrokerScope } from './broker-grants.ts';
import {
  DEFAULT_BROKER_USERS,
  natsInboxPrefix,
  natsPermissions,
  natsPermissionsInclude,
  rabbitPermissionCommands,
  rabbitPermissions,
} from './broker-permissions.ts';

const scope: BrokerScope = {
  relayTopics: ['orders.events', 'saga.replies'],
  consumers: [{ name: 'projection', groupId: 'postbox.projection', topics: ['orders.events'] }],
};
const partitions = new Map([
  ['orders.events', 2],
  ['saga.replies', 1],
]);

test('NATS: the relay publishes its partition subjects and makes their streams; a consumer reads its streams only', () => {
  const p = natsPermissions(scope, DEFAULT_BROKER_USERS, partitions);
  assert.deepEqual(p.relay.publish, [
    '$JS.API.INFO',
    '$JS.API.STREAM.CREATE.PB_orders_events_0',
    '$JS.API.STREAM.CREATE.PB_orders_events_1',
    '$JS.API.STREAM.CREATE.PB_saga_replies_0',
    '$JS.API.STREAM.INFO.PB_orders_events_0',
    '$JS.API.STREAM.INFO.PB_orders_events_1',
    '$JS.API.STREAM.INFO.PB_saga_replies_0',
    '$JS.API.STREAM.NAMES',
    'orders.events.0',
    'orders.events.1',
    'saga.replies.0',
  ]);
  assert.deepEqual(p.relay.subscribe, ['_INBOX_postbox-relay.>']);
  assert.deepEqual(p.consumer.publish, [
    '$JS.ACK.PB_orders_events_0.>',
    '$JS.ACK.PB_orders_events_1.>',
    '$JS.API.CONSUMER.CREATE.PB_orders_events_0.*',
    '$JS.API.CONSUMER.CREATE.PB_orders_events_1.*',
    '$JS.API.CONSUMER.DELETE.PB_orders_events_0.*',
    '$JS.API.CONSUMER.DELETE.PB_orders_events_1.*',
    '$JS.API.CONSUMER.INFO.PB_orders_events_0.*',
    '$JS.API.CONSUMER.INFO.PB_orders_events_1.*',
    '$JS.API.CONSUMER.LIST.PB_orders_events_0',
    '$JS.API.CONSUMER.LIST.PB_orders_events_1',
    '$JS.API.CONSUMER.MSG.NEXT.PB_orders_events_0.*',
    '$JS.API.CONSUMER.MSG.NEXT.PB_orders_events_1.*',
    '$JS.API.INFO',
    '$JS.API.STREAM.INFO.PB_orders_events_0',
    '$JS.API.STREAM.INFO.PB_orders_events_1',
    '$JS.API.STREAM.NAMES',
  ]);
  assert.deepEqual(p.api.subscribe, ['_INBOX_postbox-api.>']);
  const include = natsPermissionsInclude(p, DEFAULT_BROKER_USERS);
  assert.match(include, /^POSTBOX_CONSUMER_PERMISSIONS = \{$/m);
  assert.match(include, /^ {2}subscribe = \{ allow = \["_INBOX_postbox-consumer\.>"\] \}$/m);
});

const name = fc.stringMatching(/^[a-z][a-z0-9_-]{0,6}(\.[a-z0-9_-]{1,6})?$/);
const scopes = fc.record({
  relayTopics: fc.uniqueArray(name, { maxLength: 4 }),
  consumers: fc.array(fc.record({ name, groupId: name, topics: fc.uniqueArray(name, { maxLength: 3 }) }), {
    maxLength: 3,
  }),
  counts: fc.dictionary(name, fc.integer({ min: 1, max: 4 })),
});

test('property (NATS): each role gets its kind of subject only, the adapters names included, never an empty list', () => {
  fc.assert(
    fc.property(scopes, ({ relayTopics, consumers, counts }) => {
      const parts = new Map(Object.entries(counts));
      const p = natsPermissions({ relayTopics, consumers }, DEFAULT_BROKER_USERS, parts);
      for (const role of ['relay', 'consumer', 'api'] as const) {
        assert.ok(p[role].publish.length > 0 && p[role].subscribe.length > 0, `${role}: an empty list allows all`);
        assert.deepEqual(p[role].subscribe, [`${natsInboxPrefix(DEFAULT_BROKER_USERS[role])}.>`]);
        assert.equal(new Set(p[role].publish).size, p[role].publish.length);
      }
      for (const s of p.relay.publish)
        assert.ok(!/^\$JS\.(ACK|API\.CONSUMER)/.test(s), `the relay reads no consumer: ${s}`);
      for (const s of p.consumer.publish) assert.ok(s.startsWith('$JS.'), `a consumer publishes no event: ${s}`);
      for (const s of p.consumer.publish) assert.ok(!s.includes('STREAM.CREATE'), s);
      for (const s of p.api.publish)
        assert.match(s, /^\$JS\.API\.(INFO|STREAM\.NAMES|STREAM\.INFO\.\S+|CONSUMER\.LIST\.\S+)$/);
      const relayPublish = new Set(p.relay.publish);
      const consumerPublish = new Set(p.consumer.publish);
      const n = (t: string) => parts.get(t) ?? 12;
      for (const t of relayTopics)
        for (let i = 0; i < n(t); i++) {
          assert.ok(relayPublish.has(subjectOf(t, i)));
          assert.ok(relayPublish.has(`$JS.API.STREAM.CREATE.${streamName(t, i)}`));
        }
      for (const c of consumers)
        for (const t of c.topics)
          for (let i = 0; i < n(t); i++) {
            assert.ok(consumerPublish.has(`$JS.API.CONSUMER.MSG.NEXT.${streamName(t, i)}.*`));
            assert.ok(consumerPublish.has(`$JS.ACK.${streamName(t, i)}.>`));
          }
    }),
  );
});

test('property (RabbitMQ): the relay declares and writes its exchanges only, a consumer its queues, the API nothing', () => {
  fc.assert(
    fc.property(scopes, fc.integer({ min: 0, max: 30 }), ({ relayTopics, consumers }, partition) => {
      const p = rabbitPermissions({ relayTopics, consumers });
      const re = (pattern: string) => new RegExp(pattern);
      for (const t of relayTopics) {
        assert.match(t, re(p.relay.configure));
        assert.match(t, re(p.relay.write));
      }
      for (const c of consumers)
        for (const t of c.topics) {
          const queue = queueName(t, c.groupId, partition);
          for (const perm of ['configure', 'write', 'read'] as const) assert.match(queue, re(p.consumer[perm]));
          assert.match(t, re(p.consumer.read), 'a queue.bind reads the exchange');
          assert.doesNotMatch(t, re(p.consumer.write), 'a consumer publishes to no exchange');
          assert.doesNotMatch(queue, re(p.relay.read), 'the relay consumes no queue');
          assert.doesNotMatch(queue, re(p.relay.configure));
        }
      for (const perm of ['configure', 'write', 'read'] as const) assert.equal(p.api[perm], '^$');
      assert.equal(p.relay.read, '^$');
    }),
  );
});

test('RabbitMQ: the commands set each role on the vhost, quoted for a shell', () => {
  const lines = rabbitPermissionCommands(rabbitPermissions(scope), DEFAULT_BROKER_USERS, '/');
  assert.deepEqual(lines, [
    "rabbitmqctl set_permissions -p / postbox-relay '^(orders\\.events|saga\\.replies)$' '^(orders\\.events|saga\\.replies)$' '^$'",
    "rabbitmqctl set_permissions -p / postbox-consumer '^(orders\\.events:postbox\\.projection:\\d+)$' '^(orders\\.events:postbox\\.projection:\\d+)$' '^(orders\\.events|orders\\.events:postbox\\.projection:\\d+)$'",
    "rabbitmqctl set_permissions -p / postbox-api '^$' '^$' '^$'",
  ]);
});
