import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { check } from './check.ts';
import type { ConsumerFacts, EffectFacts, Observation, OutboxFact, RecordFact } from '../records/observation.ts';
import type { VerifyReport } from './report.ts';
import type { Invariant } from './violations.ts';

const AT = 1_000_000_000_000;
const TOPIC = 't';

/**
 * A correct run, simulated: aggregates' versions sent to the log in per-aggregate order (interleaved at random,
 * with relay re-sends), a consumer that applied them in log order through an inbox and a version gate up to a
 * processed point, and committed offsets at or below that point. Poison versions go to the failure store and
 * block their aggregate; later versions of it park.
 */
interface Run {
  observation: Observation;
  /** Events whose record the committed offset has passed, applied once each. */
  appliedBelowCommit: string[];
}

interface RunShape {
  versions: number[];
  merge: number[];
  resend: number[];
  progress: number[];
  committedShare: number[];
  poison: number[];
}

const shape: fc.Arbitrary<RunShape> = fc.record({
  versions: fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 1, maxLength: 6 }),
  merge: fc.array(fc.nat(), { minLength: 60, maxLength: 60 }),
  resend: fc.array(fc.nat({ max: 40 }), { maxLength: 5 }),
  progress: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 2, maxLength: 2 }),
  committedShare: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 2, maxLength: 2 }),
  poison: fc.array(fc.nat({ max: 30 }), { maxLength: 2 }),
});

/** Runs that consumed most of the log, so that something sits below the committed offsets. */
const consumedShape = shape.map((s) => ({
  ...s,
  progress: s.progress.map((x) => 0.5 + x / 2),
  committedShare: s.committedShare.map((x) => 0.5 + x / 2),
}));

/** The invariants a report says are violated, in report order. */
const broken = (r: VerifyReport): Invariant[] => r.violations.map((v) => v.invariant);

const id = (a: number, v: number) =>
  `00000000-0000-7000-8000-${String(a).padStart(6, '0')}${String(v).padStart(6, '0')}`;

function simulate(s: RunShape): Run {
  const pending = s.versions.map((n, a) => Array.from({ length: n }, (_, i) => ({ a, v: i + 1 })));
  const sends: Array<{ a: number; v: number }> = [];
  let k = 0;
  while (pending.some((p) => p.length > 0)) {
    const open = pending.filter((p) => p.length > 0);
    sends.push(open[s.merge[k++ % s.merge.length]! % open.length]!.shift()!);
  }
  for (const r of s.resend) if (sends.length > 0) sends.push(sends[r % sends.length]!);
  const partitionOf = (a: number) => a % 2;
  const records: RecordFact[] = [];
  const next = [0n, 0n];
  for (const e of sends) {
    const p = partitionOf(e.a);
    records.push({
      topic: TOPIC,
      partition: p,
      offset: String(next[p]!++),
      key: `a${e.a}`,
      eventId: id(e.a, e.v),
      version: e.v,
      fingerprint: `f${e.a}.${e.v}`,
    });
  }
  const outbox: OutboxFact[] = s.versions.flatMap((n, a) =>
    Array.from({ length: n }, (_, i) => {
      const r = records.find((x) => x.eventId === id(a, i + 1))!;
      return {
        eventId: id(a, i + 1),
        aggregateId: `a${a}`,
        version: i + 1,
        topic: TOPIC,
        status: 'published' as const,
        attempts: 1,
        partition: r.partition,
        offset: r.offset,
        availableAt: AT - 1000,
        leaseUntil: null,
      };
    }),
  );
  const poisoned = new Set(s.poison.map((x) => outbox[x % outbox.length]!.eventId));
  const facts: ConsumerFacts = {
    name: 'c',
    groupId: 'g',
    topics: [TOPIC],
    committed: [],
    inbox: [],
    versions: [],
    failures: [],
    retries: [],
    parked: [],
    blocked: [],
    effects: null,
  };
  const effects: EffectFacts = { kind: 'log', rows: [] };
  const last = new Map<string, number>();
  const blocked = new Set<string>();
  const appliedAt = new Map<string, { partition: number; offset: bigint }>();
  for (let p = 0; p < 2; p++) {
    const mine = records.filter((r) => r.partition === p);
    const processed = Math.min(mine.length, Math.floor(s.progress[p]! * (mine.length + 1)));
    const committed = Math.min(processed, Math.floor(s.committedShare[p]! * (processed + 1)));
    for (const r of mine.slice(0, processed)) {
      const agg = r.key!;
      if (facts.inbox.some((i) => i.eventId === r.eventId)) {
        facts.inbox.find((i) => i.eventId === r.eventId)!.duplicates++;
        continue;
      }
      if (facts.failures.some((f) => f.eventId === r.eventId)) continue; // the blocker again: absorbed
      if (poisoned.has(r.eventId!) && !blocked.has(agg)) {
        facts.failures.push({
          eventId: r.eventId,
          aggregateId: agg,
          version: r.version,
          topic: TOPIC,
          partition: p,
          offset: r.offset,
          code: 'test_poison',
          status: 'open',
        });
        facts.blocked.push({ aggregateId: agg, eventId: r.eventId, reason: 'failed' });
        blocked.add(agg);
        continue;
      }
      facts.inbox.push({ eventId: r.eventId!, aggregateId: agg, version: r.version, duplicates: 0 });
      if (blocked.has(agg)) {
        facts.parked.push({ eventId: r.eventId!, aggregateId: agg, version: r.version!, parkedAt: AT - 100 });
        continue;
      }
      effects.rows.push({ eventId: r.eventId!, aggregateId: agg, version: r.version! });
      last.set(agg, r.version!);
      appliedAt.set(r.eventId!, { partition: p, offset: BigInt(r.offset) });
    }
    if (committed > 0) facts.committed.push({ topic: TOPIC, partition: p, offset: String(committed) });
  }
  facts.versions = [...last].map(([aggregateId, lastVersion]) => ({ aggregateId, lastVersion }));
  facts.effects = effects;
  const committedOf = (p: number) => BigInt(facts.committed.find((c) => c.partition === p)?.offset ?? '0');
  const appliedBelowCommit = [...appliedAt].filter(([, at]) => at.offset < committedOf(at.partition)).map(([e]) => e);
  const partitions = [0, 1].map((p) => ({ topic: TOPIC, partition: p, low: '0', high: String(next[p]) }));
  return { observation: { at: AT, outbox, partitions, records, consumers: [facts] }, appliedBelowCommit };
}

test('check: any correct run (interleaved, re-sent, partly consumed, with poison) verifies clean and accounts for every event', () => {
  const seen = { failed: 0, blocked: 0, duplicates: 0, inFlight: 0, absorbed: 0 };
  fc.assert(
    fc.property(shape, (s) => {
      const { observation } = simulate(s);
      const r = check(observation);
      assert.deepEqual(r.violations, [], JSON.stringify(r.consumers[0]));
      const c = r.consumers[0]!;
      seen.failed += Math.sign(c.failed);
      seen.blocked += Math.sign(c.blocked);
      seen.duplicates += Math.sign(r.log.duplicates);
      seen.inFlight += Math.sign(c.inFlight);
      seen.absorbed += Math.sign(c.duplicatesAbsorbed);
      assert.equal(c.applied + c.failed + c.blocked + c.inFlight + c.ignored, c.events);
      assert.equal(c.lost.count + c.appliedTwice!.count + c.outOfOrder.count, 0);
      assert.equal(r.log.duplicates, observation.records.length - observation.outbox.length);
      return true;
    }),
  );
  // The generator reaches every kind of state the property speaks of.
  for (const [what, runs] of Object.entries(seen)) assert.ok(runs > 0, `no generated run had ${what}`);
});

test('check: an applied event whose effect disappears below the committed offset is lost', () => {
  fc.assert(
    fc.property(consumedShape, fc.nat(), (s, pick) => {
      const { observation, appliedBelowCommit } = simulate(s);
      fc.pre(appliedBelowCommit.length > 0);
      const victim = appliedBelowCommit[pick % appliedBelowCommit.length]!;
      const c = observation.consumers[0]!;
      (c.effects as Extract<EffectFacts, { kind: 'log' }>).rows = (
        c.effects as Extract<EffectFacts, { kind: 'log' }>
      ).rows.filter((e) => e.eventId !== victim);
      c.inbox = c.inbox.filter((i) => i.eventId !== victim);
      const r = check(observation);
      assert.ok(r.consumers[0]!.lost.sample.includes(victim), JSON.stringify(r.consumers[0]!.lost));
      return broken(r).includes('lost');
    }),
  );
});

test('check: an effect recorded twice is a double effect; two effects of an aggregate swapped are out of order', () => {
  fc.assert(
    fc.property(shape, fc.nat(), (s, pick) => {
      const { observation } = simulate(s);
      const log = observation.consumers[0]!.effects as Extract<EffectFacts, { kind: 'log' }>;
      fc.pre(log.rows.length > 0);
      const doubled = structuredClone(observation);
      const rows = (doubled.consumers[0]!.effects as typeof log).rows;
      rows.push(rows[pick % rows.length]!);
      const r1 = check(doubled);
      assert.equal(r1.consumers[0]!.appliedTwice!.count, 1);
      assert.ok(broken(r1).includes('applied-twice'), JSON.stringify(r1.violations));

      const i = log.rows.findIndex((e, j) => log.rows.slice(j + 1).some((f) => f.aggregateId === e.aggregateId));
      fc.pre(i >= 0);
      const j = log.rows.findIndex((f, x) => x > i && f.aggregateId === log.rows[i]!.aggregateId);
      [log.rows[i], log.rows[j]] = [log.rows[j]!, log.rows[i]!];
      const r2 = check(observation);
      assert.ok(r2.consumers[0]!.outOfOrder.count >= 1, JSON.stringify(r2.consumers[0]));
      return broken(r2).includes('out-of-order');
    }),
  );
});

test('check: an acknowledged send missing from the log is a lost write; a stored position holding another event is a conflict', () => {
  fc.assert(
    fc.property(shape, fc.nat(), (s, pick) => {
      const { observation } = simulate(s);
      const row = observation.outbox[pick % observation.outbox.length]!;
      const missing = structuredClone(observation);
      missing.records = missing.records.filter((r) => !(r.partition === row.partition && r.offset === row.offset));
      const lost = check(missing);
      assert.equal(lost.log.lostWrites.count, 1);
      assert.ok(broken(lost).includes('lost-write'), JSON.stringify(lost.violations));
      const moved = structuredClone(observation);
      const other = moved.records.find((r) => r.partition === row.partition && r.eventId !== row.eventId);
      fc.pre(other !== undefined);
      moved.outbox.find((r) => r.eventId === row.eventId)!.offset = other.offset;
      const r = check(moved);
      return r.log.positionConflicts.count >= 1 && broken(r).includes('position-conflict');
    }),
  );
});

test('check: records the broker removed by retention (below the log start) are neither lost writes nor reorders', () => {
  fc.assert(
    fc.property(shape, fc.nat(), fc.nat(), (s, pick, cut) => {
      const { observation } = simulate(s);
      const trimmed = structuredClone(observation);
      const p = trimmed.partitions[pick % trimmed.partitions.length]!;
      const low = BigInt(cut) % (BigInt(p.high) + 1n);
      p.low = String(low);
      trimmed.records = trimmed.records.filter((r) => r.partition !== p.partition || BigInt(r.offset) >= low);
      const r = check(trimmed);
      assert.equal(r.log.lostWrites.count, 0, JSON.stringify(r.violations));
      assert.equal(r.log.reordered.count, 0, JSON.stringify(r.violations));
    }),
  );
});

function base(): Observation {
  return simulate({ versions: [3, 2], merge: [0, 1], resend: [], progress: [1, 1], committedShare: [1, 1], poison: [] })
    .observation;
}

test('check: a clean, fully consumed run is ok even as a final check', () => {
  const r = check(base(), { final: true });
  assert.deepEqual(r.violations, []);
  assert.equal(r.consumers[0]!.applied, 5);
});

test('check: the same event id with another payload must be a conflict in the failure store, never absorbed silently', () => {
  const o = base();
  const first = o.records[0]!;
  o.records.push({
    ...first,
    offset: String(o.records.filter((r) => r.partition === first.partition).length),
    fingerprint: 'other',
  });
  const part = o.partitions.find((p) => p.partition === first.partition)!;
  part.high = String(Number(part.high) + 1);
  const committed = o.consumers[0]!.committed.find((p) => p.partition === first.partition)!;
  assert.equal(check(o).consumers[0]!.conflictsUnreported.count, 0, 'not yet read by the consumer: nothing to say yet');
  committed.offset = part.high;
  const r = check(o);
  assert.equal(r.consumers[0]!.conflictsUnreported.count, 1);
  assert.equal(r.ok, false);
  assert.deepEqual(
    r.violations.map(({ message: _, ...v }) => v),
    [{ invariant: 'unreported-conflict', consumer: 'c', count: 1, sample: [first.eventId], final: false }],
  );
  o.consumers[0]!.failures.push({
    eventId: first.eventId,
    aggregateId: first.key,
    version: first.version,
    topic: TOPIC,
    partition: first.partition,
    offset: first.offset,
    code: 'event_id_conflict',
    status: 'open',
  });
  const r2 = check(o);
  assert.equal(r2.consumers[0]!.conflicts, 1);
  assert.deepEqual(r2.violations, []);
});

test('check: stuck states older than the threshold fail: expired leases, overdue pending rows and retries, gaps', () => {
  const o = base();
  o.outbox[0]!.status = 'publishing';
  o.outbox[0]!.leaseUntil = AT - 120_000;
  o.outbox[1]!.status = 'pending';
  o.outbox[1]!.availableAt = AT - 120_000;
  const c = o.consumers[0]!;
  c.retries.push({ eventId: o.outbox[2]!.eventId, status: 'scheduled', nextAttemptAt: AT - 120_000 });
  const r = check(o, { stuckAfterMs: 60_000 });
  assert.equal(r.log.stuck.expiredLeases.count, 1);
  assert.equal(r.log.stuck.overduePending.count, 1);
  assert.equal(r.consumers[0]!.stuck.overdueRetries.count, 1);
  assert.deepEqual(broken(r), ['expired-lease', 'overdue-pending', 'overdue-retry']);
  assert.deepEqual(check(o, { stuckAfterMs: 600_000 }).log.stuck.expiredLeases.count, 0);

  // A gap parked for long with no failure behind it is stuck; behind a failure it is blocked, not stuck.
  const g = base();
  const gc = g.consumers[0]!;
  const v3 = g.outbox.find((x) => x.aggregateId === 'a0' && x.version === 3)!;
  (gc.effects as Extract<EffectFacts, { kind: 'log' }>).rows = (
    gc.effects as Extract<EffectFacts, { kind: 'log' }>
  ).rows.filter((e) => e.eventId !== v3.eventId);
  gc.parked.push({ eventId: v3.eventId, aggregateId: 'a0', version: 3, parkedAt: AT - 120_000 });
  assert.equal(check(g).consumers[0]!.stuck.parkedGaps.count, 1);
  assert.deepEqual(broken(check(g)), ['parked-gap']);
  gc.blocked.push({ aggregateId: 'a0', eventId: null, reason: 'failed' });
  const blocked = check(g);
  assert.equal(blocked.consumers[0]!.blocked, 1);
  assert.deepEqual(blocked.violations, []);
});

test('check: a final check fails while events are in flight; an event read whose outbox row failed is an anomaly', () => {
  const o = base();
  o.consumers[0]!.committed = [];
  (o.consumers[0]!.effects as Extract<EffectFacts, { kind: 'log' }>).rows = [];
  o.consumers[0]!.inbox = [];
  assert.equal(check(o).ok, true, 'nothing consumed yet is not a loss');
  assert.equal(check(o).consumers[0]!.inFlight, 5);
  const final = check(o, { final: true });
  assert.deepEqual(
    final.violations.map((v) => [v.invariant, v.consumer, v.count, v.final]),
    [['in-flight', 'c', 5, true]],
  );
  // An event whose retry is scheduled and not run yet: fine mid-run, not settled for a final check.
  const r = base();
  const rc = r.consumers[0]!;
  const retried = (rc.effects as Extract<EffectFacts, { kind: 'log' }>).rows.pop()!;
  rc.inbox = rc.inbox.filter((i) => i.eventId !== retried.eventId);
  rc.versions = rc.versions.map((v) =>
    v.aggregateId === retried.aggregateId ? { ...v, lastVersion: retried.version - 1 } : v,
  );
  rc.retries.push({ eventId: retried.eventId, status: 'scheduled', nextAttemptAt: AT + 5000 });
  assert.equal(check(r).consumers[0]!.retrying, 1);
  assert.equal(check(r).ok, true);
  const unsettled = check(r, { final: true }).violations;
  assert.deepEqual(
    unsettled.map((v) => [v.invariant, v.count, v.sample, v.final]),
    [['retry-pending', 1, [retried.eventId], true]],
  );
  const f = base();
  f.outbox[0]!.status = 'failed';
  assert.equal(check(f).log.failedWritesRead.count, 1);
  assert.ok(broken(check(f)).includes('failed-write-read'));
});

test('check: records without an event id are accounted by position in the failure store; counts-mode effects', () => {
  const o = base();
  const c = o.consumers[0]!;
  o.records.push({
    topic: TOPIC,
    partition: 0,
    offset: o.partitions[0]!.high,
    key: 'x',
    eventId: null,
    version: null,
    fingerprint: 'junk',
  });
  o.partitions[0]!.high = String(Number(o.partitions[0]!.high) + 1);
  c.committed.find((p) => p.partition === 0)!.offset = o.partitions[0]!.high;
  assert.equal(check(o).consumers[0]!.lost.count, 1);
  assert.deepEqual(broken(check(o)), ['lost']);
  c.failures.push({
    eventId: null,
    aggregateId: 'x',
    version: null,
    topic: TOPIC,
    partition: 0,
    offset: o.records.at(-1)!.offset,
    code: 'envelope_invalid',
    status: 'open',
  });
  assert.deepEqual(check(o).violations, []);

  c.effects = {
    kind: 'counts',
    rows: [
      { aggregateId: 'a0', version: 3, count: 3 },
      { aggregateId: 'a1', version: 2, count: 2 },
    ],
  };
  assert.deepEqual(check(o).violations, []);
  c.effects = {
    kind: 'counts',
    rows: [
      { aggregateId: 'a0', version: 3, count: 4 },
      { aggregateId: 'a1', version: 2, count: 1 },
    ],
  };
  const r = check(o);
  assert.equal(r.consumers[0]!.appliedTwice!.count, 1);
  assert.equal(r.consumers[0]!.outOfOrder.count, 1);
  assert.deepEqual(broken(r), ['applied-twice', 'out-of-order']);
});

test('check: a version applied while a lower one was never applied is out of order (a skip), with no effect source too', () => {
  const o = base();
  const c = o.consumers[0]!;
  c.effects = null;
  const v2 = o.outbox.find((x) => x.aggregateId === 'a0' && x.version === 2)!;
  c.inbox = c.inbox.filter((i) => i.eventId !== v2.eventId);
  const r = check(o);
  assert.equal(r.consumers[0]!.appliedTwice, null);
  assert.ok(r.consumers[0]!.outOfOrder.count >= 1 || r.consumers[0]!.lost.count >= 1);
  assert.ok(
    broken(r).some((n) => n === 'out-of-order' || n === 'lost'),
    JSON.stringify(r.violations),
  );
});
