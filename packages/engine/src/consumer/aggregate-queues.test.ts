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

/** The queues as first written (an array per aggregate, settle by indexOf + splice): what the head index must match. */
class ReferenceQueues {
  readonly queues = new Map<string, Array<{ id: number; state: string; bytes: number }>>();
  readonly ready = new Set<string>();
  events = 0;
  bytes = 0;
  limits = { maxEvents: 0, maxBytes: 0 };
  atCap(): boolean {
    return this.events >= this.limits.maxEvents || this.bytes >= this.limits.maxBytes;
  }
  offer(id: number, bytes: number, aggregate: string): boolean {
    if (this.atCap()) return false;
    let queue = this.queues.get(aggregate);
    if (!queue) this.queues.set(aggregate, (queue = []));
    queue.push({ id, state: 'queued', bytes });
    if (queue.length === 1) this.ready.add(aggregate);
    this.events++;
    this.bytes += bytes;
    return true;
  }
  take(max: number): number[] {
    const out: number[] = [];
    for (const aggregate of this.ready) {
      if (out.length >= max) break;
      this.ready.delete(aggregate);
      const head = this.queues.get(aggregate)![0]!;
      head.state = 'in-flight';
      out.push(head.id);
    }
    return out;
  }
  settle(aggregate: string, id: number): void {
    const queue = this.queues.get(aggregate);
    const index = queue ? queue.findIndex((e) => e.id === id) : -1;
    if (!queue || index < 0) return;
    const [entry] = queue.splice(index, 1);
    this.events--;
    this.bytes -= entry!.bytes;
    if (queue.length === 0) {
      this.queues.delete(aggregate);
      this.ready.delete(aggregate);
    } else if (queue[0]!.state === 'queued') {
      this.ready.add(aggregate);
    }
  }
  hold(aggregate: string, id: number): void {
    this.queues.get(aggregate)!.find((e) => e.id === id)!.state = 'waiting';
  }
  release(aggregate: string, id: number): boolean {
    const head = this.queues.get(aggregate)?.[0];
    if (head?.id !== id || head.state !== 'waiting') return false;
    head.state = 'queued';
    this.ready.add(aggregate);
    return true;
  }
  drop(match: (aggregate: string, id: number) => boolean): void {
    for (const [aggregate, queue] of [...this.queues]) {
      for (const e of [...queue]) if (e.state !== 'in-flight' && match(aggregate, e.id)) this.settle(aggregate, e.id);
    }
  }
  held(): Array<[number, string]> {
    return [...this.queues.values()].flatMap((q) => q.map((e) => [e.id, e.state] as [number, string]));
  }
}

type ModelOp =
  | { kind: 'offer'; aggregate: number; size: number }
  | { kind: 'take'; max: number }
  | { kind: 'cycle'; times: number }
  | { kind: 'burst'; count: number }
  | { kind: 'settle' | 'fail' | 'release' | 'settle-any' | 'settle-gone'; pick: number }
  | { kind: 'drop'; aggregate: number; parity: number };

const modelOp: fc.Arbitrary<ModelOp> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('offer' as const),
      // Half to one hot aggregate, so long queues (and their cut-off settled prefixes) are common.
      aggregate: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3 })),
      size: fc.integer({ min: 0, max: 64 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('take' as const), max: fc.integer({ min: 1, max: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cycle' as const), times: fc.integer({ min: 1, max: 60 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('burst' as const), count: fc.integer({ min: 1, max: 80 }) }) },
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constantFrom(
        'settle' as const,
        'fail' as const,
        'release' as const,
        'settle-any' as const,
        'settle-gone' as const,
      ),
      pick: fc.nat(),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('drop' as const),
      aggregate: fc.integer({ min: 0, max: 4 }),
      parity: fc.integer({ min: 0, max: 2 }),
    }),
  },
);

test('aggregate queues: the head index behaves exactly as the simple array-and-splice queues', () => {
  fc.assert(
    fc.property(
      fc.record({ maxEvents: fc.integer({ min: 1, max: 400 }), maxBytes: fc.integer({ min: 256, max: 150_000 }) }),
      fc.array(modelOp, { minLength: 100, maxLength: 600, size: 'max' }),
      (max, ops) => {
        const queues = new AggregateQueues<number>(max);
        const reference = Object.assign(new ReferenceQueues(), { limits: max });
        const byId = new Map<number, HeldEvent<number>>();
        const gone: Array<HeldEvent<number>> = [];
        const idOf = (e: HeldEvent<number>) => Number(e.offset);
        const dropMatch = (o: { aggregate: number; parity: number }) => (aggregate: string, id: number) =>
          aggregate === `a${o.aggregate}` || (o.parity > 0 && id % 2 === o.parity - 1);
        let next = 0;
        for (const o of ops) {
          const held = [...queues.held()];
          const offer = (aggregate: number, size: number) => {
            const id = next++;
            const event = queues.offer(record(id, size), BigInt(id), 0, `a${aggregate}`);
            assert.equal(event !== undefined, reference.offer(id, size + 256, `a${aggregate}`));
            if (event) byId.set(id, event);
          };
          if (o.kind === 'offer') {
            offer(o.aggregate, o.size);
          } else if (o.kind === 'burst') {
            // A hot aggregate: many events queued behind one head.
            for (let i = 0; i < o.count; i++) offer(0, 0);
          } else if (o.kind === 'take') {
            assert.deepEqual(queues.take(o.max).map(idOf), reference.take(o.max));
          } else if (o.kind === 'cycle') {
            // Busy aggregates settling in order: heads move far (the settled prefix is cut off on the way).
            for (let i = 0; i < o.times; i++) {
              const batch = queues.take(4);
              assert.deepEqual(batch.map(idOf), reference.take(4));
              for (const e of batch) {
                gone.push(e);
                queues.settle(e);
                reference.settle(e.aggregate, idOf(e));
              }
            }
          } else if (o.kind === 'drop') {
            const match = dropMatch(o);
            for (const e of held) if (e.state !== 'in-flight' && match(e.aggregate, idOf(e))) gone.push(e);
            queues.drop((e) => match(e.aggregate, idOf(e)));
            reference.drop(match);
          } else {
            const pool =
              o.kind === 'settle' || o.kind === 'fail'
                ? held.filter((e) => e.state === 'in-flight')
                : o.kind === 'release'
                  ? held.filter((e) => e.state === 'waiting')
                  : o.kind === 'settle-any'
                    ? held
                    : gone;
            if (pool.length === 0) continue;
            const e = pool[o.pick % pool.length]!;
            if (o.kind === 'fail') {
              queues.hold(e, 60_000, () => {});
              reference.hold(e.aggregate, idOf(e));
            } else if (o.kind === 'release') {
              assert.equal(queues.release(e), reference.release(e.aggregate, idOf(e)));
            } else {
              if (o.kind !== 'settle-gone') gone.push(e);
              queues.settle(e);
              reference.settle(e.aggregate, idOf(e));
            }
          }
          assert.deepEqual(
            [...queues.held()].map((e) => [idOf(e), e.state]),
            reference.held(),
          );
          assert.deepEqual(
            [queues.events, queues.bytes, queues.readyCount, queues.atCap()],
            [reference.events, reference.bytes, reference.ready.size, reference.atCap()],
          );
        }
        for (const e of [...queues.held()].filter((h) => h.state === 'in-flight')) {
          queues.settle(e);
          reference.settle(e.aggregate, idOf(e));
        }
        // The order aggregates become ready in is the order take hands them out: drain both and compare.
        for (;;) {
          const batch = queues.take(1000).map(idOf);
          assert.deepEqual(batch, reference.take(1000));
          if (batch.length === 0) break;
          for (const id of batch) {
            queues.settle(byId.get(id)!);
            reference.settle(byId.get(id)!.aggregate, id);
          }
        }
        queues.drop(() => true);
        reference.drop(() => true);
        assert.deepEqual([queues.events, queues.bytes, reference.events], [0, 0, 0]);
      },
    ),
    { numRuns: 150 },
  );
});

test('aggregate queues: an aggregate holding thousands settles each in order, the rest queued behind it', () => {
  const queues = new AggregateQueues<number>({ maxEvents: 100_000, maxBytes: 1 << 30 });
  for (let i = 0; i < 50_000; i++) queues.offer(record(i, 0), BigInt(i), 0, 'hot');
  for (let i = 0; i < 50_000; i++) {
    const [head] = queues.take(1);
    assert.equal(head!.offset, BigInt(i));
    queues.settle(head!);
  }
  assert.deepEqual([queues.events, queues.bytes, queues.readyCount], [0, 0, 0]);
});
