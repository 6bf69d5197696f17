/**
 * The soak's fault schedule (faults.mix.test.ts), a pure function of a 64-bit seed: the same seed, length and kinds
 * give the same plan on any machine, so `npm run test:faults -- --mix --seed N` replays a failing soak's schedule.
 *
 * Rules every plan keeps (fault-schedule.test.ts checks them for arbitrary seeds):
 * - faults start in order, 5–20 s apart (more when a rule below pushes a start later), and last 5–60 s;
 * - at most two faults at once, never two on the same subject (a role, a service, the failure store);
 * - an exclusive kind (a whole service stopped, two brokers down, a rolling restart) runs alone;
 * - no fault runs in the minute before each five-minute check, nor past the end: the check sees a healed system.
 *
 * The random stream is xoshiro128** seeded through splitmix64 (Vigna's recommended seeding): small, fast on 32-bit
 * integers, and specified well enough that the plan never depends on a library's version.
 */

/** The pipeline's roles: a writer, two relays, two consumers. */
export const PIPELINE_ROLES = ['w', 'r1', 'r2', 'c1', 'c2'] as const;
/**
 * The order-fulfilment saga's roles (support/saga-rig.ts): its service (starts sagas, fires timers), the
 * participants inventory, payments and shipping, the orchestrator's reply consumer, the saga's own relay.
 */
export const SOAK_SAGA_ROLES = ['sv', 'si', 'sp', 'ss', 'sr', 'sl'] as const;
/** Roles of the soak, each in its own network namespace. */
export const ROLES = [...PIPELINE_ROLES, ...SOAK_SAGA_ROLES] as const;
export type Role = (typeof ROLES)[number];

/** The services each role talks to: the targets of a partition between them. */
export const LINKS: Record<Role, readonly string[]> = {
  w: ['pg'],
  r1: ['pg', 'kafka'],
  r2: ['pg', 'kafka'],
  c1: ['pg', 'kafka', 'redis'],
  c2: ['pg', 'kafka', 'redis'],
  sv: ['pg'],
  si: ['pg', 'kafka'],
  sp: ['pg', 'kafka'],
  ss: ['pg', 'kafka'],
  sr: ['pg', 'kafka'],
  sl: ['pg', 'kafka'],
};

const links = ROLES.flatMap((role) => LINKS[role].map((service) => `${role}:${service}`));

/**
 * What the schedule can inject, and the targets of each kind. The first kinds run on one broker; the last ones
 * need the three-broker cluster (`brokers: 3` in faults.mix) and are only planned when asked for.
 */
export const TARGETS = {
  /** kill -9 of a role, restarted when the fault ends. */
  kill: ROLES,
  /** SIGSTOP of a role, SIGCONT when the fault ends. */
  stop: ROLES,
  /** A silent partition `role:service` (packets dropped). */
  partition: links,
  /** A loud partition (TCP resets). */
  reset: links,
  /** Requests reach the service, its replies are lost. */
  oneway: links,
  /** SIGKILL of the broker, restarted when the fault ends. */
  'broker-kill': ['kafka'],
  /** SIGSTOP of the broker. */
  'broker-stop': ['kafka'],
  /** SIGSTOP of PostgreSQL (the postmaster and every backend). */
  'pg-stop': ['pg'],
  /** Redis SIGKILLed, restarted from its AOF or with its data wiped. */
  'redis-restart': ['aof', 'wipe'],
  /** An extra consumer joins the group, leaves when the fault ends. */
  rebalance: ['c3'],
  /** One writer aggregate's handler fails (to the failure store); fixed and replayed when the fault ends. */
  replay: ['a0', 'a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7', 'a8', 'a9'],
  /** Cluster: SIGKILL of a partition leader's node. */
  'leader-kill': ['b1', 'b2', 'b3'],
  /** Cluster: a broker cut from the other two. */
  'broker-partition': ['b1', 'b2', 'b3'],
  /** Cluster: two of three brokers down. */
  'two-brokers-down': ['b1+b2', 'b2+b3', 'b1+b3'],
  /** Cluster: every node restarted in turn. */
  'rolling-restart': ['b1,b2,b3'],
} as const satisfies Record<string, readonly string[]>;

export type FaultKind = keyof typeof TARGETS;
export const FAULT_KINDS = Object.keys(TARGETS) as FaultKind[];
/** The kinds a single private broker supports. */
export const SINGLE_BROKER_KINDS = FAULT_KINDS.filter(
  (k) => !['leader-kill', 'broker-partition', 'two-brokers-down', 'rolling-restart'].includes(k),
);
/** Whole-service outages: anything beside them would be masked (nothing moves anyway), so they run alone. */
export const EXCLUSIVE: ReadonlySet<FaultKind> = new Set([
  'broker-kill',
  'broker-stop',
  'pg-stop',
  'two-brokers-down',
  'rolling-restart',
]);

export interface PlannedFault {
  /** Start, from the soak's t0. */
  atMs: number;
  kind: FaultKind;
  target: string;
  durationMs: number;
}

export const GAP_MS = { min: 5_000, max: 20_000 } as const;
export const DURATION_MS = { min: 5_000, max: 60_000 } as const;
export const CHECK_EVERY_MS = 5 * 60_000;
export const QUIET_MS = 60_000;
export const MAX_CONCURRENT = 2;
/** Times are multiples of this: readable plans, and no float in the arithmetic. */
const STEP_MS = 100;

/** The five-minute checks of a soak of `minutes` (strictly before its end, where the final check runs). */
export function checkTimes(minutes: number): number[] {
  const out: number[] = [];
  for (let t = CHECK_EVERY_MS; t < minutes * 60_000; t += CHECK_EVERY_MS) out.push(t);
  return out;
}

/** Who a fault acts on: two faults at once never share it. */
export function subjectOf(kind: FaultKind, target: string): string {
  if (kind === 'kill' || kind === 'stop') return target;
  if (kind === 'partition' || kind === 'reset' || kind === 'oneway') return target.split(':')[0]!;
  if (kind === 'replay') return 'failures';
  if (kind === 'rebalance') return 'group';
  if (kind === 'redis-restart') return 'redis';
  if (kind === 'pg-stop') return 'pg';
  return 'brokers';
}

/** splitmix64 (Steele, Lea, Flood): the seeding generator. Returns the next output and state. */
export function splitmix64(state: bigint): { value: bigint; state: bigint } {
  const M = (1n << 64n) - 1n;
  const s = (state + 0x9e3779b97f4a7c15n) & M;
  let z = s;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M;
  return { value: z ^ (z >> 31n), state: s };
}

/** xoshiro128** (Blackman, Vigna) over four 32-bit words; `next()` returns an unsigned 32-bit integer. */
export class Xoshiro128 {
  readonly #s: Uint32Array;

  constructor(words: [number, number, number, number]) {
    if (words.every((w) => w === 0)) throw new Error('xoshiro128** needs a non-zero state');
    this.#s = Uint32Array.from(words);
  }

  static fromSeed(seed: bigint): Xoshiro128 {
    const a = splitmix64(seed);
    const b = splitmix64(a.state);
    const lo = (v: bigint) => Number(v & 0xffffffffn);
    const hi = (v: bigint) => Number((v >> 32n) & 0xffffffffn);
    return new Xoshiro128([lo(a.value), hi(a.value), lo(b.value), hi(b.value)]);
  }

  next(): number {
    const s = this.#s;
    const [s0, s1, s2, s3] = [s[0]!, s[1]!, s[2]!, s[3]!];
    const result = Math.imul(rotl(Math.imul(s1, 5), 7), 9) >>> 0;
    const t = s1 << 9;
    const n2 = s2 ^ s0;
    const n3 = s3 ^ s1;
    s[1] = s1 ^ n2;
    s[0] = s0 ^ n3;
    s[2] = n2 ^ t;
    s[3] = rotl(n3, 11);
    return result;
  }

  /** A uniform integer in [lo, hi] (rejection sampling: no modulo bias). */
  int(lo: number, hi: number): number {
    const span = hi - lo + 1;
    if (!Number.isInteger(span) || span < 1 || span > 2 ** 32) throw new Error(`bad range [${lo}, ${hi}]`);
    const limit = 2 ** 32 - (2 ** 32 % span);
    for (;;) {
      const x = this.next();
      if (x < limit) return lo + (x % span);
    }
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(0, items.length - 1)]!;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

const steps = (r: Xoshiro128, range: { min: number; max: number }) =>
  r.int(range.min / STEP_MS, range.max / STEP_MS) * STEP_MS;

/**
 * The faults of a soak of `minutes`, sorted by start. Each draw takes a kind, a duration and a target, then the
 * earliest start from the planned time that keeps the rules above (a fault that does not fit before a quiet
 * minute waits until its check is done; one that cannot end before the soak does is shortened, or dropped when
 * under the minimum duration).
 */
export function plan(seed: bigint, minutes: number, kinds: readonly FaultKind[]): PlannedFault[] {
  if (!(minutes > 0)) throw new Error(`a soak lasts more than 0 minutes, got ${minutes}`);
  if (kinds.length === 0) throw new Error('plan: no fault kinds');
  for (const k of kinds) if (!(k in TARGETS)) throw new Error(`plan: unknown fault kind "${k}"`);
  const r = Xoshiro128.fromSeed(seed);
  const endMs = Math.floor((minutes * 60_000) / STEP_MS) * STEP_MS;
  const checks = checkTimes(minutes);
  const faults: PlannedFault[] = [];
  let t = steps(r, GAP_MS);
  while (t < endMs) {
    const kind = r.pick(kinds);
    let durationMs = steps(r, DURATION_MS);
    const target = r.pick(TARGETS[kind]);
    const subject = subjectOf(kind, target);
    for (;;) {
      const active = faults.filter((f) => f.atMs + f.durationMs > t);
      const blockers = active.filter(
        (f) =>
          EXCLUSIVE.has(kind) ||
          EXCLUSIVE.has(f.kind) ||
          active.length >= MAX_CONCURRENT ||
          subjectOf(f.kind, f.target) === subject,
      );
      if (blockers.length > 0) {
        t = Math.min(...blockers.map((f) => f.atMs + f.durationMs));
        continue;
      }
      const check = checks.find((c) => c > t);
      if (check !== undefined && t + durationMs > check - QUIET_MS) {
        t = check;
        continue;
      }
      break;
    }
    if (t >= endMs) break;
    durationMs = Math.min(durationMs, endMs - t);
    if (durationMs >= DURATION_MS.min) faults.push({ atMs: t, kind, target, durationMs });
    t += steps(r, GAP_MS);
  }
  return faults;
}

/** What the control plane runs during a soak, as an operator or its schedule would. */
export type ControlKind = 'reconcile' | 'retention';

export interface PlannedRun {
  atMs: number;
  kind: ControlKind;
}

/** Between two runs of one kind. */
export const CONTROL_GAP_MS = { min: 120_000, max: 180_000 } as const;

/**
 * The reconciliation and retention runs of a soak of `minutes`, sorted by start: each kind every 2–3 minutes
 * (its first within its first gap), none at or past the end (the final runs come after the drain). Drawn from
 * a stream of its own, so the fault plan of a seed is the same whether or not the runs are asked for.
 */
export function planControlRuns(seed: bigint, minutes: number): PlannedRun[] {
  if (!(minutes > 0)) throw new Error(`a soak lasts more than 0 minutes, got ${minutes}`);
  const r = Xoshiro128.fromSeed(seed ^ 0xc0417201c0417201n);
  const endMs = Math.floor((minutes * 60_000) / STEP_MS) * STEP_MS;
  const runs: PlannedRun[] = [];
  for (const kind of ['reconcile', 'retention'] as const)
    for (let t = steps(r, CONTROL_GAP_MS); t < endMs; t += steps(r, CONTROL_GAP_MS)) runs.push({ atMs: t, kind });
  return runs.sort((a, b) => a.atMs - b.atMs || a.kind.localeCompare(b.kind));
}

/** The plan as a few lines for the soak's log: enough to compare two runs of one seed. */
export function describePlan(faults: readonly PlannedFault[]): string[] {
  return faults.map(
    (f) =>
      `+${(f.atMs / 1000).toFixed(1).padStart(6)} s  ${f.kind.padEnd(13)} ${f.target.padEnd(9)} ${(f.durationMs / 1000).toFixed(1)} s`,
  );
}

/** A seed as the soak prints it and `--seed` takes it back: 0x + 16 hex digits. */
export function formatSeed(seed: bigint): string {
  return `0x${seed.toString(16).padStart(16, '0')}`;
}

/** `--seed` / POSTBOX_FAULT_SEED: decimal or 0x hex, 0 ≤ seed < 2^64. */
export function parseSeed(text: string): bigint {
  const s = text.trim();
  if (!/^(0x[0-9a-f]+|[0-9]+)$/i.test(s)) throw new Error(`a seed is decimal or 0x hex, got "${text}"`);
  const seed = BigInt(s);
  if (seed >= 1n << 64n) throw new Error(`a seed has at most 64 bits, got ${text}`);
  return seed;
}
