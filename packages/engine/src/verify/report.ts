import type { CheckOptions } from './options.ts';
import type { OutboxStatus } from '../records/observation.ts';
import type { Tally, Violation } from './violations.ts';

/**
 * What `check()` returns: the counts behind every invariant (for the log, and per consumer) and the violations
 * among them, plus the two views people and the fault suite read: `formatReport` and `totals`.
 */
export interface VerifyReport {
  at: string;
  ok: boolean;
  /** One per violated invariant and scope; empty when ok. */
  violations: Violation[];
  options: CheckOptions;
  log: LogReport;
  consumers: ConsumerReport[];
  /** null: the observation had no saga facts. */
  sagas: SagaReport | null;
}

/** The sagas, by status, and the tallies behind their invariants (invariants/sagas.ts). */
export interface SagaReport {
  sagas: number;
  byStatus: Record<string, number>;
  stuck: Tally;
  /** Neither ended nor frozen for an operator (a violation of a final check only). */
  unsettled: Tally;
  historyBroken: Tally;
  commandsTwice: Tally;
  compensationOrder: Tally;
  afterAttention: Tally;
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

/** Where one event stands for one consumer (invariants/consumer.ts, stateOf). */
export type EventState =
  | 'applied'
  | 'ignored'
  | 'failed'
  | 'resolved'
  | 'retrying'
  | 'blocked'
  | 'waiting'
  | 'relayFailed'
  | 'inFlight'
  | 'lost';

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

/** Totals over the consumers of a report: what the fault suite's summary line adds up. */
export interface VerifyTotals {
  events: number;
  lost: number;
  appliedTwice: number;
  reordered: number;
  duplicatesAbsorbed: number;
}

export function totals(report: VerifyReport): VerifyTotals {
  const sum = (f: (c: ConsumerReport) => number) => report.consumers.reduce((s, c) => s + f(c), 0);
  return {
    events: sum((c) => c.events),
    lost: sum((c) => c.lost.count) + report.log.lostWrites.count,
    appliedTwice: sum((c) => c.appliedTwice?.count ?? 0),
    reordered: sum((c) => c.outOfOrder.count) + report.log.reordered.count,
    duplicatesAbsorbed: sum((c) => c.duplicatesAbsorbed),
  };
}

/** A report for people: the log, one block per consumer, then the verdict with each violation. */
export function formatReport(report: VerifyReport): string {
  const { log } = report;
  const s = log.byStatus;
  const lines = [
    `postbox verify at ${report.at} (stuck after ${report.options.stuckAfterMs} ms${report.options.final ? ', final' : ''})`,
    `log: ${log.outboxEvents} outbox events (published ${s.published}, pending ${s.pending}, publishing ${s.publishing}, failed ${s.failed}); ` +
      `${log.records} records read, ${log.duplicates} duplicate sends, ${log.foreignEvents} events from outside the outbox, ${log.unidentified} records without an event id`,
    `     lost writes ${n(log.lostWrites)}, position conflicts ${n(log.positionConflicts)}, failed writes read ${n(log.failedWritesRead)}, ` +
      `reordered ${n(log.reordered)}, expired leases ${n(log.stuck.expiredLeases)}, overdue pending ${n(log.stuck.overduePending)}`,
  ];
  for (const c of report.consumers) {
    lines.push(
      `consumer ${c.consumer} (effects: ${c.effects}): ${c.events} events — applied ${c.applied}, ignored ${c.ignored}, failed ${c.failed}, resolved ${c.resolved}, ` +
        `retrying ${c.retrying}, blocked ${c.blocked}, waiting ${c.waiting}, relay-failed ${c.relayFailed}, in flight ${c.inFlight}`,
      `     lost ${n(c.lost)}, applied twice ${c.appliedTwice ? n(c.appliedTwice) : 'not checked'}, out of order ${n(c.outOfOrder)}, ` +
        `duplicates absorbed ${c.duplicatesAbsorbed}, conflicts ${c.conflicts} (unreported ${n(c.conflictsUnreported)}), ` +
        `overdue retries ${n(c.stuck.overdueRetries)}, stuck gaps ${n(c.stuck.parkedGaps)}`,
    );
  }
  const sg = report.sagas;
  if (sg && sg.sagas > 0) {
    const statuses = Object.entries(sg.byStatus)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ');
    lines.push(
      `sagas: ${sg.sagas} (${statuses}); stuck ${n(sg.stuck)}, history broken ${n(sg.historyBroken)}, ` +
        `sent forward twice ${n(sg.commandsTwice)}, compensated out of order ${n(sg.compensationOrder)}, sent while frozen ${n(sg.afterAttention)}`,
    );
  }
  lines.push(
    report.ok ? 'OK: no loss, no double effect, no reorder, nothing stuck' : `FAILED (${report.violations.length}):`,
  );
  for (const v of report.violations) lines.push(`  - ${v.message}`);
  return lines.join('\n');
}

function n(t: Tally): string {
  return String(t.count);
}
