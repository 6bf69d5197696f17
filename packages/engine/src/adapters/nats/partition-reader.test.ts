import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Consumer as JsConsumer, ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import type { InboundRecord } from '../../ports/subscriber.ts';
import { PartitionReader, type PartitionReaderOptions } from './partition-reader.ts';

// The reader's sequence bookkeeping, over a scripted pull (what JetStream delivered is given, the server is not
// what is tested here: test/src/nats covers it). A delivery that skips a sequence the stream holds must end the
// reader before anything after the gap reaches the sink; one over a deleted sequence must not.

function message(seq: number): JsMsg {
  return {
    seq,
    reply: `$JS.ACK.s.c.1.${seq}.${seq}.0.0`,
    headers: undefined,
    data: new Uint8Array(),
  } as unknown as JsMsg;
}

/** A consumer whose first pull delivers `seqs`, and whose later pulls wait until stopped. */
function scripted(seqs: number[]): JsConsumer {
  let pulls = 0;
  return {
    fetch: async () => {
      const batch = pulls++ === 0 ? seqs.map(message) : [];
      let stop: () => void = () => {};
      const stopped = new Promise<void>((resolve) => (stop = resolve));
      return {
        stop,
        async *[Symbol.asyncIterator]() {
          yield* batch;
          await stopped;
        },
      } as unknown as ConsumerMessages;
    },
  } as unknown as JsConsumer;
}

function reader(seqs: number[], heldInStream: boolean) {
  const offered: string[] = [];
  const acked: string[] = [];
  const options: PartitionReaderOptions = {
    topic: 't',
    partition: 0,
    startSeq: 1,
    paused: false,
    offer: (records: InboundRecord[]) => {
      offered.push(...records.map((r) => r.offset));
      return records.length;
    },
    ack: async (reply) => {
      acked.push(reply);
    },
    progress: () => {},
    heldInStream: async () => heldInStream,
    maxAckPending: 1000,
    onError: (e) => assert.fail(e),
  };
  return { reader: new PartitionReader(scripted(seqs), options), offered, acked };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 20));

test('a skipped sequence the stream holds ends the reader with a gap; nothing after it is offered', {
  timeout: 5000,
}, async () => {
  const { reader: r, offered } = reader([1, 2, 4, 5], true);
  assert.equal(await r.done, 'gap');
  await settle();
  // 1 and 2 may have been offered before the gap was found (they are read again from the ack floor anyway).
  assert.ok(
    offered.every((o) => Number(o) < 3),
    `offered ${offered.join(', ')}`,
  );
});

test('a skipped sequence the stream no longer holds (deleted, expired) is passed over', async () => {
  const { reader: r, offered } = reader([1, 2, 4, 5], false);
  await settle();
  assert.deepEqual(offered, ['1', '2', '4', '5']);
  assert.equal(await r.stop(), 'stopped');
});

test('a commit acknowledges the highest delivered sequence at or below it, once; redeliveries are not offered again', async () => {
  const { reader: r, offered, acked } = reader([1, 2, 3, 2], false);
  await settle();
  assert.deepEqual(offered, ['1', '2', '3']);
  await r.commit(2);
  await r.commit(2);
  assert.deepEqual(acked, ['$JS.ACK.s.c.1.2.2.0.0']);
  await r.stop();
});
