import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  CHECK_EVERY_MS,
  checkTimes,
  CONTROL_GAP_MS,
  DURATION_MS,
  EXCLUSIVE,
  FAULT_KINDS,
  formatSeed,
  GAP_MS,
  LINKS,
  MAX_CONCURRENT,
  parseSeed,
  plan,
  planControlRuns,
  QUIET_MS,
  ROLES,
  SINGLE_BROKER_KINDS,
  SOAK_SAGA_ROLES,
  splitmix64,
  subjectOf,
  TARGETS,
  Xoshiro128,
  type FaultKind,
  type PlannedFault,
} from './fault-schedule.ts';

// The soak's schedule is pure: these run in `npm test` with no server.

const seeds = fc.bigInt({ min: 0n, max: (1n << 64n) - 1n });
const kindSets = fc.subarray(FAULT_KINDS, { minLength: 1 });
const lengths = fc.integer({ min: 1, max: 45 });

test('splitmix64 and xoshiro128** give the reference outputs', () => {
  let state = 0n;
  const outputs: bigint[] = [];
  for (let i = 0; i < 3; i++) {
    const r = splitmix64(state);
    state = r.state;
    outputs.push(r.value);
  }
  assert.deepEqual(outputs, [0xe220a8397b1dcdafn, 0x6e789e6aa1b965f4n, 0x06c45d188009454fn]);
  const x = new Xoshiro128([1, 2, 3, 4]);
  assert.deepEqual(
    Array.from({ length: 6 }, () => x.next()),
    [11520, 0, 5927040, 70819200, 2031721883, 1637235492],
  );
});

test('one seed, one plan: the same seed, length and kinds give equal plans; another seed another plan', () => {
  fc.assert(
    fc.property(seeds, lengths, kindSets, (seed, minutes, kinds) => {
      assert.deepEqual(plan(seed, minutes, kinds), plan(seed, minutes, kinds));
    }),
  );
  const a = plan(1n, 30, SINGLE_BROKER_KINDS);
  const b = plan(2n, 30, SINGLE_BROKER_KINDS);
  assert.notDeepEqual(a, b);
});

/** Every rule of the module header, for one plan. */
function assertRules(faults: PlannedFault[], minutes: number, kinds: readonly FaultKind[]): void {
  const endMs = minutes * 60_000;
  const checks = checkTimes(minutes);
  for (const [i, f] of faults.entries()) {
    assert.ok(kinds.includes(f.kind), `kind ${f.kind} was not asked for`);
    assert.ok((TARGETS[f.kind] as readonly string[]).includes(f.target), `target ${f.target} of ${f.kind}`);
    assert.ok(f.durationMs >= DURATION_MS.min && f.durationMs <= DURATION_MS.max, `duration ${f.durationMs}`);
    assert.ok(f.atMs >= GAP_MS.min && f.atMs + f.durationMs <= endMs, `fault ${i} within the soak`);
    if (i > 0) assert.ok(f.atMs - faults[i - 1]!.atMs >= GAP_MS.min, `gap before fault ${i}`);
    for (const c of checks)
      assert.ok(f.atMs + f.durationMs <= c - QUIET_MS || f.atMs >= c, `fault ${i} in the quiet minute before ${c}`);
    const overlapping = faults.filter((g) => g !== f && g.atMs <= f.atMs && g.atMs + g.durationMs > f.atMs);
    assert.ok(overlapping.length < MAX_CONCURRENT, `more than ${MAX_CONCURRENT} faults at ${f.atMs}`);
    if (overlapping.length > 0) {
      assert.ok(!EXCLUSIVE.has(f.kind) && !overlapping.some((g) => EXCLUSIVE.has(g.kind)), `exclusive at ${f.atMs}`);
      for (const g of overlapping)
        assert.notEqual(subjectOf(g.kind, g.target), subjectOf(f.kind, f.target), `one subject twice at ${f.atMs}`);
    }
  }
}

test('every plan keeps the rules: gaps, durations, two at most, exclusive alone, one subject once, quiet minutes', () => {
  fc.assert(
    fc.property(seeds, lengths, kindSets, (seed, minutes, kinds) => {
      assertRules(plan(seed, minutes, kinds), minutes, kinds);
    }),
    { numRuns: 300 },
  );
});

test('a 30-minute soak of every single-broker kind injects each of them and keeps the system busy', () => {
  const faults = plan(0x5eedn, 30, SINGLE_BROKER_KINDS);
  for (const f of faults) assert.equal(f.atMs % 100, 0, 'starts on 100 ms steps');
  const kinds = new Set(faults.map((f) => f.kind));
  assert.deepEqual([...kinds].sort(), [...SINGLE_BROKER_KINDS].sort());
  // Checks at 5…25 min; the faults fill most of the time outside the quiet minutes.
  assert.deepEqual(
    checkTimes(30),
    [1, 2, 3, 4, 5].map((k) => k * CHECK_EVERY_MS),
  );
  assert.ok(faults.length >= 40, `${faults.length} faults in 30 minutes`);
});

test('the saga roles are fault targets: killed, stopped, cut from PostgreSQL and from the broker', () => {
  for (const role of SOAK_SAGA_ROLES) {
    assert.ok((TARGETS.kill as readonly string[]).includes(role) && (TARGETS.stop as readonly string[]).includes(role));
    for (const service of LINKS[role])
      for (const kind of ['partition', 'reset', 'oneway'] as const)
        assert.ok((TARGETS[kind] as readonly string[]).includes(`${role}:${service}`), `${kind} ${role}:${service}`);
  }
  assert.ok(SOAK_SAGA_ROLES.every((role) => LINKS[role].includes('pg')));
  // Over a few 30-minute plans, every role of the soak is the subject of some fault.
  const hit = new Set(
    [1n, 2n, 3n, 0x5eedn]
      .flatMap((seed) => plan(seed, 30, SINGLE_BROKER_KINDS))
      .map((f) => subjectOf(f.kind, f.target)),
  );
  assert.deepEqual(
    ROLES.filter((role) => !hit.has(role)),
    [],
  );
});

test('control runs: each kind every 2–3 minutes from its first gap, none at or past the end, one seed one plan', () => {
  fc.assert(
    fc.property(seeds, lengths, (seed, minutes) => {
      const runs = planControlRuns(seed, minutes);
      assert.deepEqual(runs, planControlRuns(seed, minutes));
      for (const kind of ['reconcile', 'retention'] as const) {
        const at = runs.filter((r) => r.kind === kind).map((r) => r.atMs);
        for (const [i, t] of at.entries()) {
          const gap = t - (i === 0 ? 0 : at[i - 1]!);
          assert.ok(gap >= CONTROL_GAP_MS.min && gap <= CONTROL_GAP_MS.max, `${kind} gap ${gap} before run ${i}`);
          assert.ok(t < minutes * 60_000, `${kind} run ${i} before the end`);
        }
        if (minutes >= 3) assert.ok(at.length >= 1, `${minutes} min: at least one ${kind} run`);
      }
      for (let i = 1; i < runs.length; i++) assert.ok(runs[i]!.atMs >= runs[i - 1]!.atMs, 'sorted by start');
    }),
    { numRuns: 200 },
  );
  assert.ok(planControlRuns(0x5eedn, 30).filter((r) => r.kind === 'reconcile').length >= 10);
});

test('seeds print as 0x + 16 hex digits and parse back, decimal or hex', () => {
  fc.assert(fc.property(seeds, (seed) => assert.equal(parseSeed(formatSeed(seed)), seed)));
  assert.equal(parseSeed('42'), 42n);
  assert.equal(parseSeed('0X2a'), 42n);
  assert.throws(() => parseSeed('-1'), /decimal or 0x hex/);
  assert.throws(() => parseSeed('0x1' + '0'.repeat(16)), /64 bits/);
  assert.throws(() => plan(1n, 0, ['kill']), /more than 0 minutes/);
  assert.throws(() => plan(1n, 1, ['nope' as FaultKind]), /unknown fault kind/);
});
