import type { CheckOptions } from '../options.ts';
import {
  partitionKey,
  positionKey,
  type Observation,
  type OutboxFact,
  type OutboxStatus,
  type RecordFact,
} from '../../records/observation.ts';
import type { LogReport } from '../report.ts';
import { add, breached, tally, unsettled, type Checked, type Tally, type Violation } from '../violations.ts';

/**
 * The log's invariants, outbox ↔ topic, after Jepsen's Kafka checks: what the relay says it sent must be in the
 * log where the broker said it put it, and in each aggregate's order, or no consumer can be right.
 * - lost-write: every acknowledged send (a row published at partition/offset) below the end offset read was
 *   read, at that position;
 * - position-conflict: one event per partition and offset (no two rows claim a position; the position holds
 *   the row's event);
 * - failed-write-read: nothing read whose write failed (an outbox row `failed` whose event is in the log);
 * - log-reorder: versions of an aggregate first appear in the log in increasing order, and none appears while a
 *   lower version is still unsent (unless that one failed at the relay);
 * - expired-lease, overdue-pending: no row stuck in the relay longer than `stuckAfterMs`;
 * - unpublished (final check only): every row sent.
 * Duplicates (relay re-sends) are counted, not errors: at-least-once sending is the contract.
 */
export function checkLog(o: Observation, opts: CheckOptions): Checked<LogReport> {
  const byStatus: Record<OutboxStatus, number> = { pending: 0, publishing: 0, published: 0, failed: 0 };
  const stored = new Map<string, OutboxFact>();
  for (const row of o.outbox) {
    byStatus[row.status]++;
    stored.set(row.eventId, row);
  }
  const ends = new Map(o.partitions.map((p) => [partitionKey(p.topic, p.partition), p]));
  const at = new Map<string, RecordFact>();
  const first = new Map<string, RecordFact>();
  let duplicates = 0;
  let unidentified = 0;
  for (const r of o.records) {
    at.set(positionKey(r.topic, r.partition, r.offset), r);
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
  const unpublished = tally();
  const claimed = new Map<string, string>();
  for (const row of o.outbox) {
    if (row.status === 'pending' || row.status === 'publishing') add(unpublished, row.eventId);
    if (row.status === 'failed' && first.has(row.eventId)) add(report.failedWritesRead, row.eventId);
    if (row.status === 'publishing' && row.leaseUntil !== null && row.leaseUntil < o.at - opts.stuckAfterMs)
      add(report.stuck.expiredLeases, row.eventId);
    if (row.status === 'pending' && row.availableAt < o.at - opts.stuckAfterMs)
      add(report.stuck.overduePending, row.eventId);
    if (row.status !== 'published' || row.partition === null || row.offset === null) continue;
    const pos = positionKey(row.topic, row.partition, row.offset);
    const other = claimed.get(pos);
    if (other !== undefined) add(report.positionConflicts, `${row.eventId} and ${other} at ${pos}`);
    claimed.set(pos, row.eventId);
    const end = ends.get(partitionKey(row.topic, row.partition));
    const offset = BigInt(row.offset);
    // Below the log start: removed by retention. At or past the end read: published after the log was read.
    if (end && (offset < BigInt(end.low) || offset >= BigInt(end.high))) continue;
    const found = at.get(pos);
    if (!found) add(report.lostWrites, `${row.eventId} at ${pos}`);
    else if (found.eventId !== row.eventId)
      add(
        report.positionConflicts,
        `${row.eventId} stored at ${pos}, which holds ${found.eventId ?? 'a record without event id'}`,
      );
  }
  // A row whose stored position is below its partition's log start was removed by the broker's retention: its order
  // is the position the broker acknowledged (earlier than any copy still in the log), not "unsent". A re-send whose
  // first copy was removed while the stored, later copy is kept can still look reordered: nothing in the log
  // remembers the first copy.
  const removed = (row: OutboxFact): Position | null => {
    if (row.status !== 'published' || row.partition === null || row.offset === null) return null;
    const end = ends.get(partitionKey(row.topic, row.partition));
    return end && BigInt(row.offset) < BigInt(end.low) ? { partition: row.partition, offset: row.offset } : null;
  };
  for (const aggregate of reorderedAggregates(o.outbox, first, removed)) add(report.reordered, aggregate);
  return { report, violations: logViolations(report, unpublished, opts) };
}

type Position = Pick<RecordFact, 'partition' | 'offset'>;

/**
 * Aggregates whose outbox versions first appear in the log out of order, or past a lower version still unsent.
 * `removed` gives the acknowledged position of a row the log no longer holds (below its start).
 */
function reorderedAggregates(
  outbox: OutboxFact[],
  first: Map<string, RecordFact>,
  removed: (row: OutboxFact) => Position | null,
): string[] {
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
    let last: Position | null = null;
    let unsentBelow = false;
    let bad = false;
    for (const row of rows) {
      const seen = removed(row) ?? first.get(row.eventId);
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

function logViolations(r: LogReport, unpublished: Tally, opts: CheckOptions): Violation[] {
  return [
    ...breached('lost-write', null, r.lostWrites, 'acknowledged sends missing from the log'),
    ...breached('position-conflict', null, r.positionConflicts, 'more than one event claims a partition/offset'),
    ...breached('failed-write-read', null, r.failedWritesRead, 'events read whose outbox row failed'),
    ...breached('log-reorder', null, r.reordered, 'aggregates out of order in the log'),
    ...breached(
      'expired-lease',
      null,
      r.stuck.expiredLeases,
      `leases expired over ${opts.stuckAfterMs} ms ago and not reclaimed`,
    ),
    ...breached('overdue-pending', null, r.stuck.overduePending, `pending rows due over ${opts.stuckAfterMs} ms ago`),
    ...unsettled('unpublished', null, unpublished, 'outbox rows not published yet', opts.final),
  ];
}
