import type { Tx } from '../db/connect.ts';
import { fingerprint } from '../envelope/fingerprint.ts';
import { parkEvents, type ParkedRow } from '../queries/consumer-parked.ts';
import { lockAggregates, saveVersions } from '../queries/consumer-version.ts';
import { insertInbox } from '../queries/inbox-insert.ts';
import { settleRetriedFailure } from '../queries/retry-settle.ts';
import { drain } from './drain.ts';
import { withinTimeout } from './handler-timeout.ts';
import { conflictFailure } from './settle.ts';
import type { StepDeps, ValidEvent } from './step-deps.ts';
import { storeRecord } from '../records/stored-record.ts';
import { expectedVersion, gate } from './version-gate.ts';
import type { RecordResult } from '../records/wire.ts';

/**
 * Applies valid events of distinct aggregates in one transaction `tx`:
 *
 *   lock the aggregates' version rows (created at 0 when new) — serialises two owners during a rebalance
 *   a due retry of the event that blocks its aggregate lifts the block
 *   INSERT inbox … ON CONFLICT DO NOTHING → not inserted = duplicate (or a conflict: the id reused)
 *   per event: version gate → ignore | park (durable) | apply: handler(event, tx)
 *   drain the parked successors of what applied; park the new future versions; save versions
 *
 * `single`: the transaction holds this one event (the per-event fallback), so drained successors run in
 * savepoints and settle their own failures.
 */
export async function applyEvents(
  deps: StepDeps,
  tx: Tx,
  events: ValidEvent[],
  single: boolean,
): Promise<RecordResult[]> {
  const consumer = deps.definition.name;
  const states = await lockAggregates(
    tx,
    consumer,
    events.map((e) => e.envelope.aggregate_id),
  );
  const isBlocker = (e: ValidEvent) => {
    const by = states.get(e.envelope.aggregate_id)?.blockedBy;
    return typeof by === 'string' && (by === e.envelope.event_id || by === e.record.headers.replaces);
  };
  // A due retry (or replay) of the head of a block lifts it; its successors drain after it below.
  for (const e of events) {
    if (!e.record.retry || !isBlocker(e)) continue;
    const replaced = e.record.headers.replaces ? [e.record.headers.replaces] : [];
    await settleRetriedFailure(tx, consumer, e.envelope.aggregate_id, [e.envelope.event_id, ...replaced]);
    states.get(e.envelope.aggregate_id)!.blockedBy = undefined;
  }
  // The blocking event itself, delivered again by the broker, waits in the ledger or the failure store: absorbed.
  const intake = events.filter((e) => !isBlocker(e));
  const verdicts = await insertInbox(
    tx,
    consumer,
    intake.map((e) => ({
      event_id: e.envelope.event_id,
      aggregate_id: e.envelope.aggregate_id,
      aggregate_version: e.envelope.aggregate_version,
      fingerprint: fingerprint(e.record),
    })),
  );
  const verdictOf = new Map(intake.map((e, i) => [e, verdicts[i]!]));
  const results: RecordResult[] = [];
  const versions = new Map<string, number>();
  const park: ParkedRow[] = [];
  const toApply: ValidEvent[] = [];
  for (const event of events) {
    const { envelope, record } = event;
    const verdict = verdictOf.get(event) ?? 'duplicate';
    if (verdict === 'conflict') {
      results.push(await conflictFailure(tx, deps, event));
      continue;
    }
    if (verdict === 'duplicate') {
      results.push({ outcome: 'duplicate', drained: 0 });
      continue;
    }
    const state = states.get(envelope.aggregate_id)!;
    const last = state.lastVersion === 0 ? undefined : state.lastVersion;
    const decision =
      state.blockedBy !== undefined ? 'park' : gate(last, envelope.aggregate_version, deps.definition.firstVersion);
    if (decision === 'ignore') {
      results.push({ outcome: 'ignored', drained: 0 });
    } else if (decision === 'park') {
      park.push({
        aggregate_id: envelope.aggregate_id,
        aggregate_version: envelope.aggregate_version,
        event_id: envelope.event_id,
        expected_version: expectedVersion(last),
        record: storeRecord(record),
      });
      results.push({ outcome: 'parked', drained: 0 });
    } else {
      toApply.push(event);
      versions.set(envelope.aggregate_id, envelope.aggregate_version);
      results.push({ outcome: 'applied', drained: 0 });
    }
  }
  await runHandlers(deps, tx, toApply);
  // Only aggregates with parked versions can have successors to drain: most batches skip the query.
  const drainable = toApply.map((e) => e.envelope.aggregate_id).filter((a) => states.get(a)!.parked);
  if (drainable.length > 0) {
    const { counts, retries } = await drain(deps, tx, drainable, versions, single);
    for (let i = 0; i < events.length; i++) {
      if (results[i]!.outcome !== 'applied') continue;
      const aggregate = events[i]!.envelope.aggregate_id;
      const n = counts.get(aggregate);
      if (n) results[i]!.drained = n;
      const later = retries.get(aggregate);
      if (later) results[i]!.successorRetries = [later];
    }
  }
  // Independent statements, pipelined.
  await Promise.all([parkEvents(tx, consumer, park), saveVersions(tx, consumer, versions)]);
  return results;
}

/**
 * Runs the handlers of events of distinct aggregates, in order, `handlerConcurrency` at a time (statements of
 * handlers started together are pipelined on the transaction's connection). All started handlers finish before
 * an error is rethrown, so nothing runs on the transaction after it is rolled back.
 */
async function runHandlers(deps: StepDeps, tx: Tx, events: ValidEvent[]): Promise<void> {
  const consumer = deps.definition.name;
  const limit = deps.definition.limits.handlerTimeoutMs;
  const contextOf = (e: ValidEvent) => ({
    consumer,
    partition: e.record.partition,
    offset: e.record.offset,
    attempt: e.record.attempt,
  });
  // A batch handler takes the task's events in one call (one statement for all, if it writes set-based); a
  // single event still goes through the per-event path, inside its own process span.
  const batch = deps.batchHandler;
  if (batch && events.length > 1) {
    const items = events.map((e) => ({ event: e.envelope, context: contextOf(e) }));
    await withinTimeout(() => batch(items, tx), limit);
    return;
  }
  const run = (e: ValidEvent) => withinTimeout(() => deps.handler(e.envelope, tx, contextOf(e)), limit);
  const width = deps.definition.limits.handlerConcurrency;
  if (width <= 1) {
    for (const e of events) await run(e);
    return;
  }
  for (let i = 0; i < events.length; i += width) {
    const settled = await Promise.allSettled(events.slice(i, i + width).map(run));
    const failed = settled.find((s) => s.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
  }
}
