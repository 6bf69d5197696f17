import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { aclKey, DEFAULT_KAFKA_PRINCIPALS, kafkaAclCommands, kafkaAcls, type BrokerScope } from './broker-grants.ts';

const scope: BrokerScope = {
  relayTopics: ['orders.events', 'saga.replies'],
  consumers: [
    { name: 'projection', groupId: 'postbox.projection', topics: ['orders.events'] },
    { name: 'replies', groupId: 'postbox.replies', topics: ['saga.replies'] },
  ],
};

test('the relay writes only its topics, consumers read only theirs and their groups, the API only describes', () => {
  const acls = kafkaAcls(scope).map(aclKey);
  assert.deepEqual(
    acls.filter((a) => a.startsWith('relay ')),
    [
      'relay cluster:kafka-cluster IDEMPOTENT_WRITE',
      'relay topic:orders.events DESCRIBE',
      'relay topic:orders.events WRITE',
      'relay topic:saga.replies DESCRIBE',
      'relay topic:saga.replies WRITE',
    ],
  );
  assert.deepEqual(
    acls.filter((a) => a.startsWith('consumer ')),
    [
      'consumer group:postbox.projection READ',
      'consumer group:postbox.replies READ',
      'consumer topic:orders.events DESCRIBE',
      'consumer topic:orders.events READ',
      'consumer topic:saga.replies DESCRIBE',
      'consumer topic:saga.replies READ',
    ],
  );
  assert.deepEqual(
    acls.filter((a) => a.startsWith('api ')),
    [
      'api group:postbox.projection DESCRIBE',
      'api group:postbox.replies DESCRIBE',
      'api topic:orders.events DESCRIBE',
      'api topic:saga.replies DESCRIBE',
    ],
  );
});

test('property: no role ever gets more than its kind of access, and every needed grant is there', () => {
  const name = fc.stringMatching(/^[a-z][a-z0-9._-]{0,12}$/);
  fc.assert(
    fc.property(
      fc.uniqueArray(name, { maxLength: 5 }),
      fc.array(fc.record({ name, groupId: name, topics: fc.uniqueArray(name, { maxLength: 3 }) }), { maxLength: 4 }),
      (relayTopics, consumers) => {
        const acls = kafkaAcls({ relayTopics, consumers });
        for (const a of acls) {
          if (a.role === 'consumer') assert.notEqual(a.operation, 'WRITE');
          if (a.role === 'api') assert.equal(a.operation, 'DESCRIBE');
          if (a.role === 'relay') assert.ok(a.resourceType !== 'group', 'the relay reads no group');
        }
        const keys = new Set(acls.map(aclKey));
        assert.equal(keys.size, acls.length, 'no repeats');
        for (const t of relayTopics) assert.ok(keys.has(`relay topic:${t} WRITE`));
        for (const c of consumers) {
          assert.ok(keys.has(`consumer group:${c.groupId} READ`));
          for (const t of c.topics) assert.ok(keys.has(`consumer topic:${t} READ`));
        }
      },
    ),
  );
});

test('the printed commands quote what a shell would split', () => {
  const [line] = kafkaAclCommands(
    [{ role: 'consumer', resourceType: 'group', name: "odd group's", operation: 'READ' }],
    DEFAULT_KAFKA_PRINCIPALS,
  );
  assert.equal(
    line,
    `kafka-acls.sh --bootstrap-server "$KAFKA_BROKERS" --add --allow-principal User:postbox-consumer --operation READ --group 'odd group'\\''s'`,
  );
});
