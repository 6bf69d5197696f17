import type { ConsumerFacts, FailureFact, Observation, OutboxFact, OutboxStatus, RecordFact } from './observation.ts';

/**
 * The verifier's checks, pure over an Observation (observation.ts). Two levels, after Jepsen's Kafka checks:
 *
 * The log (outbox ↔ topic):
 * - every acknowledged send (a row published at partition/offset) below the end offset read was read, at that
 *   position (else a lost write);
 * - one event per partition and offset (no two rows claim a position; the position holds the row's event);
 * - nothing read whose write failed (an outbox row `failed` whose event is in the log);
 * - no reordering or skips per aggregate: versions first appear in the log in increasing order, and none appears
 *   while a lower version is still unsent (unless that one failed at the relay);
 * - duplicates (relay re-sends) are counted, not errors.
 *
 * Each consumer (every event of its topics: outbox rows, events produced around the outbox, and unreadable
 * records): an event the consumer's committed offset has passed must be applied, ignored by the version gate,
 * in the failure store, on the retry ledger, or parked — else it is lost; one that it has not passed yet is in
 * flight. With an effect source, an event applied more than once is a double effect, and applying versions of an
 * aggregate out of order is a reorder; applying a version while a lower one is neither applied nor resolved is a
 * skip (counted as out of order). The same event_id with another payload must be in the failure store as a
 * conflict, never silently absorbed.
 *
 * Stuck: leases expired and not reclaimed, pending rows due long ago, retries overdue, gaps parked long (that no
 * failure explains) — each older than `stuckAfterMs`.
 */
export interface CheckOptions {
  /** @defaultValue 60000 */
  stuckAfterMs: number;
  /** Everything is expected to have settled: events still in flight are a violation too. @defaultValue false */
  final: boolean;
}

export const defaultCheckOptions: CheckOptions = { stuckAfterMs: 60_000, final: false };

/** A count and the first few ids behind it. */
export interface Tally {
  count: number;
  sample: string[];
}

export interface LogReport {
  outboxEvents: number;
  byStatus: Record<OutboxStatus, number>;
  records: number;
  /** Records of an event already read at a lower position: relay re-sends, the counted duplicate window. */
  duplicates: number;
  /** Distinct events in the log that have no outbox row (produced around the outbox). */
  foreignEvents: number;
  /** Records without a readable event id (not an event at all). */
  unidentified: number;
  lostWrites: Tally;
  positionConflicts: Tally;
  failedWritesRead: Tally;
  reordered: Tally;
  stuck: { expiredLeases: Tally; overduePending: Tally };
}

export type EventState = 'applied' | 'ignored' | 'failed' | 'resolved' | 'retrying' | 'blocked' | 'waiting' | 'relayFailed' | 'inFlight' | 'lost';

export interface ConsumerReport {
  consumer: string;
  effects: 'log' | 'counts' | 'none';
  /** Events of its topics (outbox rows + events produced around the outbox) and unreadable records. */
  events: number;
  applied: number;
  ignored: number;
  /** In the failure store (open or expired). */
  failed: number;
  /** Failures an operator replayed or skipped, with no effect here. */
  resolved: number;
  retrying: number;
  /** Parked behind a failure (of this consumer, or of the relay). */
  blocked: number;
  /** Parked for a gap, younger than the stuck threshold. */
  waiting: number;
  /** Never sent: the outbox row failed at the relay (a failure home of its own). */
  relayFailed: number;
  /** Not yet sent, or sent and not yet passed by the group's committed offset. */
  inFlight: number;
  /** Redeliveries absorbed by the inbox. */
  duplicatesAbsorbed: number;
  /** Same event_id, another payload: in the failure store as a conflict. */
  conflicts: number;
  lost: Tally;
  /** null: no effect source, not checked. */
  appliedTwice: Tally | null;
  outOfOrder: Tally;
  conflictsUnreported: Tally;
  stuck: { overdueRetries: Tally; parkedGaps: Tally };
}

export interface VerifyReport {
  at: string;
  ok: boolean;
  /** One line per violated invariant; empty when ok. */
  violations: string[];
  options: CheckOptions;
  log: LogReport;
  consumers: ConsumerReport[];
}

const SAMPLE = 10;

function tally(): Tally {
  return { count: 0, sample: [] };
}

function add(t: Tally, id: string): void {
  t.count++;
  if (t.sample.length < SAMPLE) t.sample.push(id);
}

const tp = (topic: string, partition: number) => `${topic}/${partition}`;
const position = (topic: string, partition: number, offset: string) => `${topic}/${partition}/${offset}`;

export function check(o: Observation, options: Partial<CheckOptions> = {}): VerifyReport {
  const opts: CheckOptions = { ...defaultCheckOptions, ...options };
  const log = checkLog(o, opts);
  const consumers = o.consumers.map((c) => checkConsumer(o, c, opts));
  const violations = violationsOf(log, consumers, opts);
  return { at: new Date(o.at).toISOString(), ok: violations.length === 0, violations, options: opts, log, consumers };
}

function checkLog(o: Observation, opts: CheckOptions): LogReport {
  const byStatus: Record<OutboxStatus, number> = { pending: 0, publishing: 0, published: 0, failed: 0 };
  const stored = new Map<string, OutboxFact>();
  for (const row of o.outbox) {
    byStatus[row.status]++;
    stored.set(row.eventId, row);
  }
  const ends = new Map(o.partitions.map((p) => [tp(p.topic, p.partition), p]));
  const at = new Map<string, RecordFact>();
  const first = new Map<string, RecordFact>();
  let duplicates = 0;
  let unidentified = 0;
  for (const r of o.records) {
    at.set(position(r.topic, r.partition, r.offset), r);
    if (r.eventId === null) unidentified++;
    else if (first.has(r.eventId)) duplicates++;
    else first.set(r.eventId, r);
  }
  const report: LogReport = {
    outboxEvents: o.outbox.length,
    byStatus,
    records: o.records.length,
    duplicates,
    foreignEvents: [...first.keys()].filter((id) => !stored.has(id)).length,
    unidentified,
    lostWrites: tally(),
    positionConflicts: tally(),
    failedWritesRead: tally(),
    reordered: tally(),
    stuck: { expiredLeases: tally(), overduePending: tally() },
  };
  const claimed = new Map<string, string>();
  for (const row of o.outbox) {
    if (row.status === 'failed' && first.has(row.eventId)) add(report.failedWritesRead, row.eventId);
    if (row.status === 'publishing' && row.leaseUntil !== null && row.leaseUntil < o.at - opts.stuckAfterMs) add(report.stuck.expiredLeases, row.eventId);
    if (row.status === 'pending' && row.availableAt < o.at - opts.stuckAfterMs) add(report.stuck.overduePending, row.eventId);
    if (row.status !== 'published' || row.partition === null || row.offset === null) continue;
    const pos = position(row.topic, row.partition, row.offset);
    const other = claimed.get(pos);
    if (other !== undefined) add(report.positionConflicts, `${row.eventId} and ${other} at ${pos}`);
    claimed.set(pos, row.eventId);
    const end = ends.get(tp(row.topic, row.partition));
    const offset = BigInt(row.offset);
    // Below the log start: removed by retention. At or past the end read: published after the log was read.
    if (end && (offset < BigInt(end.low) || offset >= BigInt(end.high))) continue;
    const found = at.get(pos);
    if (!found) add(report.lostWrites, `${row.eventId} at ${pos}`);
    else if (found.eventId !== row.eventId) add(report.positionConflicts, `${row.eventId} stored at ${pos}, which holds ${found.eventId ?? 'a record without event id'}`);
  }
  for (const aggregate of logOrderViolations(o.outbox, first)) add(report.reordered, aggregate);
  return report;
}

/** Aggregates whose outbox versions first appear in the log out of order, or past a lower version still unsent. */
function logOrderViolations(outbox: OutboxFact[], first: Map<string, RecordFact>): string[] {
  const byAggregate = new Map<string, OutboxFact[]>();
  for (const row of outbox) {
    const key = `${row.topic}\u0000${row.aggregateId}`;
    const list = byAggregate.get(key);
    if (list) list.push(row);
    else byAggregate.set(key, [row]);
  }
  const out: string[] = [];
  for (const rows of byAggregate.values()) {
    rows.sort((a, b) => a.version - b.version);
    let last: RecordFact | null = null;
    let unsentBelow = false;
    let bad = false;
    for (const row of rows) {
      const seen = first.get(row.eventId);
      if (!seen) {
        if (row.status !== 'failed') unsentBelow = true;
        continue;
      }
      if (unsentBelow) bad = true;
      if (last && (last.partition !== seen.partition || BigInt(last.offset) > BigInt(seen.offset))) bad = true;
      last = seen;
    }
    if (bad) out.push(rows[0]!.aggregateId);
  }
  return out;
}

interface Unit {
  eventId: string | null;
  aggregateId: string;
  version: number;
  outbox: OutboxFact | null;
  positions: Array<{ topic: string; partition: number; offset: string }>;
  fingerprints: Set<string>;
}

/** The consumer's facts indexed for the per-event questions. */
class ConsumerIndex {
  readonly committed = new Map<string, bigint>();
  readonly inbox = new Map<string, { version: number | null; duplicates: number }>();
  readonly lastVersion = new Map<string, number>();
  readonly failureByEvent = new Map<string, FailureFact[]>();
  readonly failureAt = new Map<string, FailureFact>();
  readonly retry = new Map<string, ConsumerFacts['retries'][number]>();
  readonly parked = new Map<string, ConsumerFacts['parked'][number]>();
  readonly blocked = new Set<string>();
  readonly effectCount = new Map<string, number>();
  readonly projection = new Map<string, { version: number; count: number }>();

  readonly c: ConsumerFacts;

  constructor(c: ConsumerFacts) {
    this.c = c;
    for (const p of c.committed) this.committed.set(tp(p.topic, p.partition), BigInt(p.offset));
    for (const r of c.inbox) this.inbox.set(r.eventId, r);
    for (const v of c.versions) this.lastVersion.set(v.aggregateId, v.lastVersion);
    for (const f of c.failures) {
      if (f.eventId) this.failureByEvent.set(f.eventId, [...(this.failureByEvent.get(f.eventId) ?? []), f]);
      if (f.topic !== null && f.partition !== null && f.offset !== null) this.failureAt.set(position(f.topic, f.partition, f.offset), f);
    }
    for (const r of c.retries) this.retry.set(r.eventId, r);
    for (const p of c.parked) this.parked.set(p.eventId, p);
    for (const b of c.blocked) this.blocked.add(b.aggregateId);
    if (c.effects?.kind === 'log') for (const e of c.effects.rows) this.effectCount.set(e.eventId, (this.effectCount.get(e.eventId) ?? 0) + 1);
    if (c.effects?.kind === 'counts') for (const r of c.effects.rows) this.projection.set(r.aggregateId, r);
  }

  consumed(u: Unit): boolean {
    return u.positions.some((p) => (this.committed.get(tp(p.topic, p.partition)) ?? -1n) > BigInt(p.offset));
  }

  /** Every record of the event passed by the committed offset. */
  consumedAll(u: Unit): boolean {
    return u.positions.length > 0 && u.positions.every((p) => (this.committed.get(tp(p.topic, p.partition)) ?? -1n) > BigInt(p.offset));
  }

  applied(u: Unit): boolean {
    const id = u.eventId!;
    const effects = this.c.effects;
    if (effects?.kind === 'log') return (this.effectCount.get(id) ?? 0) > 0;
    if (effects?.kind === 'counts') {
      const row = this.projection.get(u.aggregateId);
      return row !== undefined && u.version >= 1 && u.version <= row.version;
    }
    return this.inbox.has(id) && (this.lastVersion.get(u.aggregateId) ?? 0) >= u.version && !this.parked.has(id);
  }
}

function unitsOf(o: Observation, c: ConsumerFacts): { units: Map<string, Unit>; unidentified: RecordFact[] } {
  const topics = new Set(c.topics);
  const units = new Map<string, Unit>();
  for (const row of o.outbox) {
    if (!topics.has(row.topic)) continue;
    const positions = row.status === 'published' && row.partition !== null && row.offset !== null ? [{ topic: row.topic, partition: row.partition, offset: row.offset }] : [];
    units.set(row.eventId, { eventId: row.eventId, aggregateId: row.aggregateId, version: row.version, outbox: row, positions, fingerprints: new Set() });
  }
  const unidentified: RecordFact[] = [];
  for (const r of o.records) {
    if (!topics.has(r.topic)) continue;
    if (r.eventId === null) {
      unidentified.push(r);
      continue;
    }
    let u = units.get(r.eventId);
    if (!u) {
      u = { eventId: r.eventId, aggregateId: r.key ?? '', version: r.version ?? 0, outbox: null, positions: [], fingerprints: new Set() };
      units.set(r.eventId, u);
    }
    u.positions.push({ topic: r.topic, partition: r.partition, offset: r.offset });
    u.fingerprints.add(r.fingerprint);
  }
  return { units, unidentified };
}

function checkConsumer(o: Observation, c: ConsumerFacts, opts: CheckOptions): ConsumerReport {
  const index = new ConsumerIndex(c);
  const { units, unidentified } = unitsOf(o, c);
  const report: ConsumerReport = {
    consumer: c.name,
    effects: c.effects?.kind ?? 'none',
    events: units.size + unidentified.length,
    applied: 0, ignored: 0, failed: 0, resolved: 0, retrying: 0, blocked: 0, waiting: 0, relayFailed: 0, inFlight: 0,
    duplicatesAbsorbed: c.inbox.reduce((s, r) => s + r.duplicates, 0),
    conflicts: 0,
    lost: tally(),
    appliedTwice: c.effects ? tally() : null,
    outOfOrder: tally(),
    conflictsUnreported: tally(),
    stuck: { overdueRetries: tally(), parkedGaps: tally() },
  };
  const stuckBefore = o.at - opts.stuckAfterMs;
  const states = new Map<Unit, EventState>();
  const byAggregate = new Map<string, Unit[]>();
  for (const u of units.values()) {
    const list = byAggregate.get(u.aggregateId);
    if (list) list.push(u);
    else byAggregate.set(u.aggregateId, [u]);
  }
  // The alarm of a scheduled retry never rang (or its run never settled the row), whatever the event's state.
  for (const r of c.retries) if (r.status === 'scheduled' && r.nextAttemptAt < stuckBefore) add(report.stuck.overdueRetries, r.eventId);
  const relayFailedBelow = (u: Unit) => (byAggregate.get(u.aggregateId) ?? []).some((x) => x.version < u.version && x.outbox?.status === 'failed');
  for (const u of units.values()) {
    const state = stateOf(u, index, relayFailedBelow(u), stuckBefore, report);
    states.set(u, state);
    count(report, state, u.eventId!);
    if (u.fingerprints.size > 1) {
      if ((index.failureByEvent.get(u.eventId!) ?? []).some((f) => f.code === 'event_id_conflict')) report.conflicts++;
      else if (index.consumedAll(u)) add(report.conflictsUnreported, u.eventId!);
    }
  }
  for (const r of unidentified) {
    const pos = position(r.topic, r.partition, r.offset);
    if (index.failureAt.has(pos)) report.failed++;
    else if ((index.committed.get(tp(r.topic, r.partition)) ?? -1n) > BigInt(r.offset)) add(report.lost, `record at ${pos}`);
    else report.inFlight++;
  }
  effectChecks(c, index, byAggregate, states, report);
  return report;
}

function stateOf(u: Unit, index: ConsumerIndex, relayFailedBelow: boolean, stuckBefore: number, report: ConsumerReport): EventState {
  const id = u.eventId!;
  if (index.applied(u)) return 'applied';
  const failures = index.failureByEvent.get(id) ?? [];
  if (failures.some((f) => f.status === 'open' || f.status === 'expired')) return 'failed';
  const retry = index.retry.get(id);
  if (retry?.status === 'scheduled') return 'retrying';
  if (failures.length > 0) return 'resolved';
  const parked = index.parked.get(id);
  if (parked) {
    if (index.blocked.has(u.aggregateId) || relayFailedBelow) return 'blocked';
    if (parked.parkedAt < stuckBefore) add(report.stuck.parkedGaps, `${u.aggregateId}@${u.version}`);
    return 'waiting';
  }
  if (index.inbox.has(id)) return (index.lastVersion.get(u.aggregateId) ?? 0) >= u.version ? 'ignored' : 'lost';
  if (u.outbox?.status === 'failed') return 'relayFailed';
  if (u.outbox && u.outbox.status !== 'published') return 'inFlight';
  return index.consumed(u) ? 'lost' : 'inFlight';
}

function count(report: ConsumerReport, state: EventState, id: string): void {
  if (state === 'lost') add(report.lost, id);
  else report[state]++;
}

/** Double effects and order, from the effect source; skips (a version applied over an unresolved lower one) always. */
function effectChecks(c: ConsumerFacts, index: ConsumerIndex, byAggregate: Map<string, Unit[]>, states: Map<Unit, EventState>, report: ConsumerReport): void {
  const effects = c.effects;
  const outOfOrder = new Map<string, string>();
  if (effects?.kind === 'log') {
    for (const [id, n] of index.effectCount) if (n > 1) add(report.appliedTwice!, id);
    const seen = new Set<string>();
    const last = new Map<string, number>();
    for (const e of effects.rows) {
      if (seen.has(e.eventId)) continue;
      seen.add(e.eventId);
      const prev = last.get(e.aggregateId);
      if (prev !== undefined && e.version <= prev) outOfOrder.set(e.aggregateId, `${e.aggregateId} (version ${e.version} applied after ${prev})`);
      last.set(e.aggregateId, e.version);
    }
  } else if (effects?.kind === 'counts') {
    for (const r of effects.rows) {
      const what = `${r.aggregateId} (${r.count} effects for version ${r.version})`;
      if (r.count > r.version) add(report.appliedTwice!, what);
      else if (r.count < r.version) outOfOrder.set(r.aggregateId, what);
    }
  }
  for (const [aggregate, list] of byAggregate) {
    if (outOfOrder.has(aggregate)) continue;
    const top = list.reduce((m, u) => (states.get(u) === 'applied' && u.version > m ? u.version : m), 0);
    const skipped = list.find((u) => u.version < top && !['applied', 'ignored', 'resolved'].includes(states.get(u)!));
    if (skipped) outOfOrder.set(aggregate, `${aggregate} (version ${top} applied while ${skipped.version} is ${states.get(skipped)})`);
  }
  for (const what of outOfOrder.values()) add(report.outOfOrder, what);
}

function violationsOf(log: LogReport, consumers: ConsumerReport[], opts: CheckOptions): string[] {
  const out: string[] = [];
  const v = (t: Tally | null, what: string) => {
    if (t && t.count > 0) out.push(`${what}: ${t.count} (${t.sample.slice(0, 3).join('; ')}${t.count > 3 ? '; …' : ''})`);
  };
  v(log.lostWrites, 'log: acknowledged sends missing from the log');
  v(log.positionConflicts, 'log: more than one event claims a partition/offset');
  v(log.failedWritesRead, 'log: events read whose outbox row failed');
  v(log.reordered, 'log: aggregates out of order in the log');
  v(log.stuck.expiredLeases, `log: leases expired over ${opts.stuckAfterMs} ms ago and not reclaimed`);
  v(log.stuck.overduePending, `log: pending rows due over ${opts.stuckAfterMs} ms ago`);
  if (opts.final && log.byStatus.pending + log.byStatus.publishing > 0) {
    out.push(`log: ${log.byStatus.pending + log.byStatus.publishing} outbox rows not published yet (final check)`);
  }
  for (const c of consumers) {
    const p = `consumer ${c.consumer}`;
    v(c.lost, `${p}: lost (committed, passed by the offset, neither applied nor in the failure store/retry ledger/parked)`);
    v(c.appliedTwice, `${p}: side effects applied more than once`);
    v(c.outOfOrder, `${p}: aggregates applied out of order`);
    v(c.conflictsUnreported, `${p}: same event_id with another payload, absorbed silently`);
    v(c.stuck.overdueRetries, `${p}: retries overdue by over ${opts.stuckAfterMs} ms`);
    v(c.stuck.parkedGaps, `${p}: gaps parked over ${opts.stuckAfterMs} ms with no failure behind them`);
    if (opts.final && c.inFlight > 0) out.push(`${p}: ${c.inFlight} events still in flight (final check)`);
    // A retry not yet run is not settled either: its event is neither applied nor in the failure store yet.
    if (opts.final && c.retrying > 0) out.push(`${p}: ${c.retrying} events waiting for a scheduled retry (final check)`);
  }
  return out;
}
