import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import type { InboundRecord } from '../ports/subscriber.ts';
import { AggregateQueues, type HeldEvent } from './aggregate-queues.ts';

type Op =
  | { kind: 'offer'; aggregate: number; size: number }
  | { kind: 'take'; max: number }
  | { kind: 'settle'; pick: number }
  | { kind: 'fail'; pick: number }
  | { kind: 'release'; pick: number }
  | { kind: 'drop'; aggregate: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant('offer' as const),
    aggregate: fc.integer({ min: 0, max: 7 }),
    size: fc.integer({ min: 0, max: 400 }),
  }),
  fc.record({ kind: fc.constant('take' as const), max: fc.integer({ min: 1, max: 5 }) }),
  fc.record({ kind: fc.constant('settle' as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant('fail' as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant('release' as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant('drop' as const), aggregate: fc.integer({ min: 0, max: 7 }) }),
);
const limits = fc.record({ maxEvents: fc.integer({ min: 1, max: 20 }), maxBytes: fc.integer({ min: 256, max: 4000 }) });

function record(offset: number, size: number): InboundRecord {
  return { topic: 't', partition: 0, offset: String(offset), key: null, value: Buffer.alloc(size), headers: {} };
}

/** Runs the operations, checking the invariants after each; returns nothing, throws on a violation. */
function run(max: { maxEvents: number; maxBytes: number }, ops: Op[]): void {
  const queues = new AggregateQueues<number>(max);
  const offered: Array<HeldEvent<number>> = [];
  let offset = 0;
  let largest = 0;
  const inFlight = () => [...queues.held()].filter((e) => e.state === 'in-flight');
  const waiting = () => [...queues.held()].filter((e) => e.state === 'waiting');
  for (const o of ops) {
    if (o.kind === 'offer') {
      const wasAtCap = queues.atCap();
      const held = queues.offer(record(offset++, o.size), BigInt(offset), 0, `a${o.aggregate}`);
      // Refused exactly when a cap was reached, never below it.
      assert.equal(held === undefined, wasAtCap);
      if (held) {
        offered.push(held);
        largest = Math.max(largest, held.bytes);
      }
    } else if (o.kind === 'take') {
      const batch = queues.take(o.max);
      assert.ok(batch.length <= o.max);
      assert.equal(new Set(batch.map((e) => e.aggregate)).size, batch.length, 'one event per aggregate in a batch');
    } else if (o.kind === 'settle' || o.kind === 'fail') {
      const candidates = inFlight();
      if (candidates.length === 0) continue;
      const event = candidates[o.pick % candidates.length]!;
      if (o.kind === 'settle') queues.settle(event);
      else queues.hold(event, 60_000, () => {});
    } else if (o.kind === 'release') {
      const candidates = waiting();
      if (candidates.length > 0) assert.ok(queues.release(candidates[o.pick % candidates.length]!));
    } else {
      queues.drop((e) => e.aggregate === `a${o.aggregate}`);
    }
    const held = [...queues.held()];
    // The caps: the count exactly, the bytes passed by at most the one record that reached the cap.
    assert.ok(queues.events <= max.maxEvents, `${queues.events} events held, cap ${max.maxEvents}`);
    assert.ok(queues.bytes < max.maxBytes + largest, `${queues.bytes} bytes held, cap ${max.maxBytes}`);
    assert.equal(queues.events, held.length);
    assert.equal(
      queues.bytes,
      held.reduce((s, e) => s + e.bytes, 0),
    );
    const byAggregate = new Map<string, Array<HeldEvent<number>>>();
    for (const e of held) byAggregate.set(e.aggregate, [...(byAggregate.get(e.aggregate) ?? []), e]);
    let ready = 0;
    for (const [aggregate, events] of byAggregate) {
      // At most one event per aggregate is out of the queued state, and it is the head.
      const active = events.filter((e) => e.state !== 'queued');
      assert.ok(active.length <= 1, `${aggregate} has ${active.length} events in flight or waiting`);
      if (active.length === 1) assert.equal(active[0], events[0]);
      else ready++;
      // Per aggregate, events stay in the order they were offered.
      const order = events.map((e) => offered.indexOf(e));
      assert.deepEqual(
        order,
        [...order].sort((a, b) => a - b),
      );
    }
    assert.equal(queues.readyCount, ready, 'every aggregate with a queued head is ready, no other');
  }
  queues.drop(() => true); // clears the backoff timers of waiting heads
}

test('aggregate queues: one event per aggregate in flight, FIFO per aggregate, caps held exactly', () => {
  fc.assert(fc.property(limits, fc.array(op, { maxLength: 120 }), run), { numRuns: 300 });
});

test('aggregate queues: take hands out the heads of distinct aggregates only, until all are in flight', () => {
  const queues = new AggregateQueues<number>({ maxEvents: 100, maxBytes: 1 << 20 });
  for (let i = 0; i < 6; i++) queues.offer(record(i, 10), BigInt(i), 0, `a${i % 3}`);
  const first = queues.take(10);
  assert.deepEqual(
    first.map((e) => e.record.offset),
    ['0', '1', '2'],
  );
  assert.deepEqual(queues.take(10), []);
  queues.settle(first[1]!);
  assert.deepEqual(
    queues.take(10).map((e) => e.record.offset),
    ['4'],
  );
});

test('aggregate queues: a held head comes back after its backoff, ahead of its successors', async () => {
  const queues = new AggregateQueues<number>({ maxEvents: 10, maxBytes: 1 << 20 });
  queues.offer(record(0, 1), 0n, 0, 'a');
  queues.offer(record(1, 1), 1n, 0, 'a');
  const [head] = queues.take(5);
  const back = new Promise<void>((resolve) => queues.hold(head!, 5, resolve));
  assert.deepEqual(queues.take(5), []);
  await back;
  assert.deepEqual(
    queues.take(5).map((e) => e.record.offset),
    ['0'],
  );
  queues.drop(() => true);
});
