import type { ConsumerReport, Tally, VerifyReport } from './check.ts';

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
  lines.push(report.ok ? 'OK: no loss, no double effect, no reorder, nothing stuck' : `FAILED (${report.violations.length}):`);
  for (const v of report.violations) lines.push(`  - ${v}`);
  return lines.join('\n');
}

function n(t: Tally): string {
  return String(t.count);
}
