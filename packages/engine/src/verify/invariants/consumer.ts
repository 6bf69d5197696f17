import type { CheckOptions } from '../options.ts';
import {
  partitionKey,
  positionKey,
  type ConsumerFacts,
  type FailureFact,
  type Observation,
  type OutboxFact,
  type RecordFact,
} from '../../records/observation.ts';
import type { ConsumerReport, EventState } from '../report.ts';
import { add, breached, tally, unsettled, type Checked, type Tally, type Violation } from '../violations.ts';
import { checkEffects, effectViolations } from './effects.ts';

/**
 * Each consumer's events: every event of its topics (outbox rows, events produced around the outbox, and
 * unreadable records) has exactly one place to be, so that nothing the consumer was given disappears.
 * - lost: an event the group's committed offset has passed must be applied, ignored by the version gate, in the
 *   failure store, on the retry ledger, or parked; one it has not passed yet is in flight;
 * - unreported-conflict: the same event_id with another payload must be in the failure store as a conflict,
 *   never silently absorbed;
 * - overdue-retry, parked-gap: no retry overdue, no gap parked (that no failure explains) longer than
 *   `stuckAfterMs`;
 * - in-flight, retry-pending (final check only): nothing still on its way.
 * Double effects and order are the effect source's questions (effects.ts).
 */
export function checkConsumer(o: Observation, c: ConsumerFacts, opts: CheckOptions): Checked<ConsumerReport> {
  const index = new ConsumerIndex(c);
  const { expected, unidentified } = expectedEvents(o, c);
  const report: ConsumerReport = {
    consumer: c.name,
    effects: c.effects?.kind ?? 'none',
    events: expected.size + unidentified.length,
    applied: 0,
    ignored: 0,
    failed: 0,
    resolved: 0,
    retrying: 0,
    blocked: 0,
    waiting: 0,
    relayFailed: 0,
    inFlight: 0,
    duplicatesAbsorbed: c.inbox.reduce((s, r) => s + r.duplicates, 0),
    conflicts: 0,
    lost: tally(),
    appliedTwice: null,
    outOfOrder: tally(),
    conflictsUnreported: tally(),
    stuck: { overdueRetries: tally(), parkedGaps: tally() },
  };
  const inFlight = tally();
  const retrying = tally();
  const stuckBefore = o.at - opts.stuckAfterMs;
  const byAggregate = new Map<string, ExpectedEvent[]>();
  for (const e of expected.values()) {
    const list = byAggregate.get(e.aggregateId);
    if (list) list.push(e);
    else byAggregate.set(e.aggregateId, [e]);
  }
  // The alarm of a scheduled retry never rang (or its run never settled the row), whatever the event's state.
  for (const r of c.retries)
    if (r.status === 'scheduled' && r.nextAttemptAt < stuckBefore) add(report.stuck.overdueRetries, r.eventId);
  const states = new Map<ExpectedEvent, EventState>();
  for (const e of expected.values()) {
    const id = e.eventId;
    const relayFailedBelow = byAggregate
      .get(e.aggregateId)!
      .some((x) => x.version < e.version && x.outbox?.status === 'failed');
    const state = stateOf(e, index, relayFailedBelow);
    states.set(e, state);
    if (state === 'lost') add(report.lost, id);
    else report[state]++;
    if (state === 'inFlight') add(inFlight, id);
    if (state === 'retrying') add(retrying, id);
    if (state === 'waiting' && index.parked.get(id)!.parkedAt < stuckBefore)
      add(report.stuck.parkedGaps, `${e.aggregateId}@${e.version}`);
    if (e.fingerprints.size > 1) {
      if ((index.failureByEvent.get(id) ?? []).some((f) => f.code === 'event_id_conflict')) report.conflicts++;
      else if (index.consumedAll(e)) add(report.conflictsUnreported, id);
    }
  }
  for (const r of unidentified) {
    const pos = positionKey(r.topic, r.partition, r.offset);
    if (index.failureAt.has(pos)) report.failed++;
    else if ((index.committed.get(partitionKey(r.topic, r.partition)) ?? -1n) > BigInt(r.offset))
      add(report.lost, `record at ${pos}`);
    else {
      report.inFlight++;
      add(inFlight, `record at ${pos}`);
    }
  }
  const aggregates = new Map(
    [...byAggregate].map(([a, list]) => [a, list.map((e) => ({ version: e.version, state: states.get(e)! }))]),
  );
  const effects = checkEffects(c.effects, aggregates);
  report.appliedTwice = effects.appliedTwice;
  report.outOfOrder = effects.outOfOrder;
  return { report, violations: consumerViolations(report, { inFlight, retrying }, opts) };
}

function consumerViolations(
  report: ConsumerReport,
  unsettledWork: { inFlight: Tally; retrying: Tally },
  opts: CheckOptions,
): Violation[] {
  const p = report.consumer;
  return [
    ...breached(
      'lost',
      p,
      report.lost,
      'lost (committed, passed by the offset, neither applied nor in the failure store/retry ledger/parked)',
    ),
    ...effectViolations(report),
    ...breached(
      'unreported-conflict',
      p,
      report.conflictsUnreported,
      'same event_id with another payload, absorbed silently',
    ),
    ...breached('overdue-retry', p, report.stuck.overdueRetries, `retries overdue by over ${opts.stuckAfterMs} ms`),
    ...breached(
      'parked-gap',
      p,
      report.stuck.parkedGaps,
      `gaps parked over ${opts.stuckAfterMs} ms with no failure behind them`,
    ),
    ...unsettled('in-flight', p, unsettledWork.inFlight, 'events still in flight', opts.final),
    // A retry not yet run is not settled either: its event is neither applied nor in the failure store yet.
    ...unsettled('retry-pending', p, unsettledWork.retrying, 'events waiting for a scheduled retry', opts.final),
  ];
}

/** An event the consumer should account for: from the outbox, from the log, or both. */
export interface ExpectedEvent {
  eventId: string;
  aggregateId: string;
  version: number;
  outbox: OutboxFact | null;
  positions: Array<{ topic: string; partition: number; offset: string }>;
  fingerprints: Set<string>;
}

/** The consumer's facts indexed for the per-event questions. */
export class ConsumerIndex {
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
    for (const p of c.committed) this.committed.set(partitionKey(p.topic, p.partition), BigInt(p.offset));
    for (const r of c.inbox) this.inbox.set(r.eventId, r);
    for (const v of c.versions) this.lastVersion.set(v.aggregateId, v.lastVersion);
    for (const f of c.failures) {
      if (f.eventId) this.failureByEvent.set(f.eventId, [...(this.failureByEvent.get(f.eventId) ?? []), f]);
      if (f.topic !== null && f.partition !== null && f.offset !== null)
        this.failureAt.set(positionKey(f.topic, f.partition, f.offset), f);
    }
    for (const r of c.retries) this.retry.set(r.eventId, r);
    for (const p of c.parked) this.parked.set(p.eventId, p);
    for (const b of c.blocked) this.blocked.add(b.aggregateId);
    if (c.effects?.kind === 'log')
      for (const e of c.effects.rows) this.effectCount.set(e.eventId, (this.effectCount.get(e.eventId) ?? 0) + 1);
    if (c.effects?.kind === 'counts') for (const r of c.effects.rows) this.projection.set(r.aggregateId, r);
  }

  /** Some record of the event passed by the committed offset. */
  consumed(e: ExpectedEvent): boolean {
    return e.positions.some((p) => (this.committed.get(partitionKey(p.topic, p.partition)) ?? -1n) > BigInt(p.offset));
  }

  /** Every record of the event passed by the committed offset. */
  consumedAll(e: ExpectedEvent): boolean {
    return (
      e.positions.length > 0 &&
      e.positions.every((p) => (this.committed.get(partitionKey(p.topic, p.partition)) ?? -1n) > BigInt(p.offset))
    );
  }

  applied(e: ExpectedEvent): boolean {
    const id = e.eventId;
    const effects = this.c.effects;
    if (effects?.kind === 'log') return (this.effectCount.get(id) ?? 0) > 0;
    if (effects?.kind === 'counts') {
      const row = this.projection.get(e.aggregateId);
      return row !== undefined && e.version >= 1 && e.version <= row.version;
    }
    return this.inbox.has(id) && (this.lastVersion.get(e.aggregateId) ?? 0) >= e.version && !this.parked.has(id);
  }
}

/** The events of the consumer's topics, by id, and the records that carry no readable event id. */
function expectedEvents(
  o: Observation,
  c: ConsumerFacts,
): { expected: Map<string, ExpectedEvent>; unidentified: RecordFact[] } {
  const topics = new Set(c.topics);
  const expected = new Map<string, ExpectedEvent>();
  for (const row of o.outbox) {
    if (!topics.has(row.topic)) continue;
    const positions =
      row.status === 'published' && row.partition !== null && row.offset !== null
        ? [{ topic: row.topic, partition: row.partition, offset: row.offset }]
        : [];
    expected.set(row.eventId, {
      eventId: row.eventId,
      aggregateId: row.aggregateId,
      version: row.version,
      outbox: row,
      positions,
      fingerprints: new Set(),
    });
  }
  const unidentified: RecordFact[] = [];
  for (const r of o.records) {
    if (!topics.has(r.topic)) continue;
    if (r.eventId === null) {
      unidentified.push(r);
      continue;
    }
    let e = expected.get(r.eventId);
    if (!e) {
      e = {
        eventId: r.eventId,
        aggregateId: r.key ?? '',
        version: r.version ?? 0,
        outbox: null,
        positions: [],
        fingerprints: new Set(),
      };
      expected.set(r.eventId, e);
    }
    e.positions.push({ topic: r.topic, partition: r.partition, offset: r.offset });
    e.fingerprints.add(r.fingerprint);
  }
  return { expected, unidentified };
}

/** Where one event stands for this consumer: the first home that holds it, in the order the engine settles. */
export function stateOf(e: ExpectedEvent, index: ConsumerIndex, relayFailedBelow: boolean): EventState {
  const id = e.eventId;
  if (index.applied(e)) return 'applied';
  const failures = index.failureByEvent.get(id) ?? [];
  if (failures.some((f) => f.status === 'open' || f.status === 'expired')) return 'failed';
  const retry = index.retry.get(id);
  if (retry?.status === 'scheduled') return 'retrying';
  if (failures.length > 0) return 'resolved';
  if (index.parked.has(id)) return index.blocked.has(e.aggregateId) || relayFailedBelow ? 'blocked' : 'waiting';
  if (index.inbox.has(id)) return (index.lastVersion.get(e.aggregateId) ?? 0) >= e.version ? 'ignored' : 'lost';
  if (e.outbox?.status === 'failed') return 'relayFailed';
  if (e.outbox && e.outbox.status !== 'published') return 'inFlight';
  return index.consumed(e) ? 'lost' : 'inFlight';
}
