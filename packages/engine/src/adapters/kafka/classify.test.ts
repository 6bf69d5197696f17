import { test } from 'node:test';
import assert from 'node:assert/strict';
import kafkajs from 'kafkajs';
import { BrokerError } from '../../errors.ts';
import { classify } from '../../retry/classify.ts';
import { classifyKafkaError } from './classify.ts';

const { KafkaJSConnectionError, KafkaJSNumberOfRetriesExceeded, KafkaJSProtocolError, KafkaJSRequestTimeoutError } =
  kafkajs;

const protocol = (type: string, code: number) =>
  new KafkaJSProtocolError({ message: type, type, code, retriable: false } as never);

test('kafka errors: permanent, transient, unknown; an unknown topic is transient for a few attempts, then permanent', () => {
  const tooLarge = classifyKafkaError(protocol('MESSAGE_TOO_LARGE', 10));
  assert.deepEqual([tooLarge.code, tooLarge.kind], ['kafka_message_too_large', 'permanent']);

  const unknownTopic = classifyKafkaError(
    new KafkaJSNumberOfRetriesExceeded(protocol('UNKNOWN_TOPIC_OR_PARTITION', 3), { retryCount: 3, retryTime: 100 }),
  );
  assert.ok(unknownTopic instanceof BrokerError);
  assert.deepEqual(
    [unknownTopic.code, unknownTopic.kind, unknownTopic.permanentAfter],
    ['kafka_unknown_topic_or_partition', 'transient', 8],
  );

  const timeout = classifyKafkaError(new KafkaJSRequestTimeoutError('Request Produce(key: 0, version: 7) timed out'));
  assert.deepEqual([timeout.kind, (timeout as BrokerError).permanentAfter], ['unknown', undefined]);
  assert.ok(timeout.cause, 'the original error is the cause');
});

test('kafkajs errors as the adapter hands them on: Postbox classification by kind and code, never immediate', () => {
  const table: Array<[unknown, string, string]> = [
    [new KafkaJSConnectionError('down'), 'transient', 'kafka_connectionerror'],
    [new KafkaJSRequestTimeoutError('slow'), 'unknown', 'kafka_requesttimeouterror'],
    [protocol('MESSAGE_TOO_LARGE', 10), 'permanent', 'kafka_message_too_large'],
  ];
  for (const [raw, kind, code] of table) {
    assert.deepEqual(classify(classifyKafkaError(raw)), { kind, code, immediate: false }, String(raw));
  }
});
