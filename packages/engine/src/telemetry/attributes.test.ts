import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as semconv from '@opentelemetry/semantic-conventions/incubating';
import { ATTR, LEGACY_ATTR, MESSAGING_SYSTEM, OPERATION } from './attributes.ts';

// The literals in attributes.ts must be the pinned conventions' names, so a semconv upgrade that renames one
// fails here rather than in someone's dashboard.
test('attribute names are those of the pinned semantic conventions', () => {
  assert.equal(ATTR.systemName, semconv.ATTR_MESSAGING_SYSTEM_NAME);
  assert.equal(ATTR.operationType, semconv.ATTR_MESSAGING_OPERATION_TYPE);
  assert.equal(ATTR.operationName, semconv.ATTR_MESSAGING_OPERATION_NAME);
  assert.equal(ATTR.destinationName, semconv.ATTR_MESSAGING_DESTINATION_NAME);
  assert.equal(ATTR.partitionId, semconv.ATTR_MESSAGING_DESTINATION_PARTITION_ID);
  assert.equal(ATTR.messageId, semconv.ATTR_MESSAGING_MESSAGE_ID);
  assert.equal(ATTR.consumerGroup, semconv.ATTR_MESSAGING_CONSUMER_GROUP_NAME);
  assert.equal(ATTR.batchCount, semconv.ATTR_MESSAGING_BATCH_MESSAGE_COUNT);
  assert.equal(ATTR.bodySize, semconv.ATTR_MESSAGING_MESSAGE_BODY_SIZE);
  assert.equal(ATTR.kafkaKey, semconv.ATTR_KAFKA_MESSAGE_KEY);
  assert.equal(ATTR.kafkaOffset, semconv.ATTR_KAFKA_OFFSET);
  assert.equal(ATTR.errorType, semconv.ATTR_ERROR_TYPE);
  assert.equal(LEGACY_ATTR.system, semconv.ATTR_MESSAGING_SYSTEM);
  assert.equal(LEGACY_ATTR.kafkaKey, semconv.ATTR_MESSAGING_KAFKA_MESSAGE_KEY);
  assert.equal(LEGACY_ATTR.kafkaOffset, semconv.ATTR_MESSAGING_KAFKA_OFFSET);
  assert.equal(MESSAGING_SYSTEM, semconv.MESSAGING_SYSTEM_NAME_VALUE_KAFKA);
  assert.equal(OPERATION.create, semconv.MESSAGING_OPERATION_TYPE_VALUE_CREATE);
  assert.equal(OPERATION.send, semconv.MESSAGING_OPERATION_TYPE_VALUE_SEND);
  assert.equal(OPERATION.process, semconv.MESSAGING_OPERATION_TYPE_VALUE_PROCESS);
  assert.equal(OPERATION.settle, semconv.MESSAGING_OPERATION_TYPE_VALUE_SETTLE);
});
