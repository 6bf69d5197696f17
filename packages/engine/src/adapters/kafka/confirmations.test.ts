import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Message } from 'kafkajs';
import { confirmations } from './confirmations.ts';
import type { OutboundMessage } from '../../ports/publisher.ts';

function batch(partitions: number[]): {
  messages: OutboundMessage[];
  sent: Message[];
  chosen: WeakMap<Message, number>;
} {
  const chosen = new WeakMap<Message, number>();
  const sent: Message[] = [];
  const messages: OutboundMessage[] = partitions.map((p, i) => {
    const m: Message = { key: `k${i}`, value: 'v' };
    sent.push(m);
    chosen.set(m, p);
    return { topic: 't', key: `k${i}`, value: Buffer.from('v'), headers: {} };
  });
  return { messages, sent, chosen };
}

test('confirmations: each message at its partition base offset plus its place in the request', () => {
  const { messages, sent, chosen } = batch([0, 1, 0, 0]);
  const out = confirmations(
    messages,
    sent,
    [
      { topicName: 't', partition: 0, errorCode: 0, baseOffset: '10' },
      { topicName: 't', partition: 1, errorCode: 0, baseOffset: '7' },
    ],
    chosen,
  );
  assert.deepEqual(
    out.map((o) => (o.ok ? `${o.confirmation.partition}@${o.confirmation.offset}` : 'x')),
    ['0@10', '1@7', '0@11', '0@12'],
  );
});

test('confirmations: a partition the answer does not cover, or covers without an offset, is unknown, never confirmed', () => {
  const { messages, sent, chosen } = batch([0, 1, 2]);
  const out = confirmations(
    messages,
    sent,
    [
      { topicName: 't', partition: 0, errorCode: 0, baseOffset: '3' },
      { topicName: 't', partition: 2, errorCode: 0, baseOffset: '-1' },
    ],
    chosen,
  );
  assert.equal(out[0]!.ok, true);
  for (const o of [out[1]!, out[2]!]) {
    assert.equal(o.ok, false);
    if (!o.ok) {
      assert.equal(o.error.code, 'publish_unconfirmed');
      assert.equal(o.error.kind, 'unknown');
    }
  }
});
