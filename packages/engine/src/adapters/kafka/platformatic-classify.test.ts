import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  AuthenticationError,
  MultipleErrors,
  NetworkError,
  ProtocolError,
  TimeoutError,
  UserError,
} from '@platformatic/kafka';
import { BrokerError } from '../../errors.ts';
import { classifyPlatformaticError } from './platformatic-classify.ts';

// What a failed send throws: "Producing messages failed." holding each broker's error.
const sendFailed = (...errors: Error[]) => new MultipleErrors('Producing messages failed.', errors);

test('@platformatic/kafka errors get the kafkajs adapter codes and kinds: permanent, transient, unknown', () => {
  const tooLarge = classifyPlatformaticError(sendFailed(new ProtocolError('MESSAGE_TOO_LARGE')));
  assert.deepEqual([tooLarge.code, tooLarge.kind], ['kafka_message_too_large', 'permanent']);

  const listTooLarge = classifyPlatformaticError(sendFailed(new ProtocolError('RECORD_LIST_TOO_LARGE')));
  assert.deepEqual([listTooLarge.code, listTooLarge.kind], ['kafka_record_list_too_large', 'permanent']);

  const unknownTopic = classifyPlatformaticError(sendFailed(new ProtocolError('UNKNOWN_TOPIC_OR_PARTITION')));
  assert.ok(unknownTopic instanceof BrokerError);
  assert.deepEqual(
    [unknownTopic.code, unknownTopic.kind, unknownTopic.permanentAfter],
    ['kafka_unknown_topic_or_partition', 'transient', 8],
  );

  const notLeader = classifyPlatformaticError(sendFailed(new ProtocolError('NOT_LEADER_OR_FOLLOWER')));
  assert.deepEqual([notLeader.code, notLeader.kind], ['kafka_not_leader_or_follower', 'transient']);

  // The cause chain is searched too, and the request timeout is not a plain network error.
  const timeout = classifyPlatformaticError(
    sendFailed(new NetworkError('connection failed', { cause: new TimeoutError('Request timed out') })),
  );
  assert.deepEqual([timeout.code, timeout.kind], ['kafka_request_timeout', 'unknown']);
  assert.match(timeout.message, /Request timed out/);

  const refused = classifyPlatformaticError(sendFailed(new NetworkError('Connection to 127.0.0.1:1 failed.')));
  assert.deepEqual([refused.code, refused.kind], ['kafka_network', 'transient']);

  const auth = classifyPlatformaticError(new AuthenticationError('SASL authentication failed.'));
  assert.deepEqual([auth.code, auth.kind], ['kafka_sasl_authentication_failed', 'permanent']);

  // The client's metadata turns an unknown topic into a user error: kafkajs' code, transient for a few attempts.
  const noTopic = classifyPlatformaticError(sendFailed(new UserError('Unknown topic orders.events.')));
  assert.ok(noTopic instanceof BrokerError);
  assert.deepEqual(
    [noTopic.code, noTopic.kind, noTopic.permanentAfter],
    ['kafka_unknown_topic_or_partition', 'transient', 8],
  );

  // A record's own error (UNKNOWN_SERVER_ERROR, listed first) does not hide the partition's; a permanent error
  // of a later attempt is not hidden by an earlier transient one.
  const invalid = classifyPlatformaticError(
    sendFailed(new ProtocolError('UNKNOWN_SERVER_ERROR'), new ProtocolError('INVALID_RECORD')),
  );
  assert.deepEqual([invalid.code, invalid.kind], ['kafka_invalid_record', 'permanent']);
  const retried = classifyPlatformaticError(
    sendFailed(new ProtocolError('NOT_LEADER_OR_FOLLOWER'), new ProtocolError('MESSAGE_TOO_LARGE')),
  );
  assert.deepEqual([retried.code, retried.kind], ['kafka_message_too_large', 'permanent']);

  const other = classifyPlatformaticError(new Error('socket hang up'));
  assert.deepEqual([other.code, other.kind], ['kafka_error', 'transient']);
  assert.equal(other.cause instanceof Error, true, 'the original error is the cause');
});
