import type { Tx } from '../db/connect.ts';
import { deleteParked, parkedOf } from '../queries/consumer-parked.ts';
import { dirtyLanes, isDirty, markDirty } from '../outbox/dirty.ts';
import { forgetInbox } from '../queries/inbox-insert.ts';
import { classify } from '../retry/classify.ts';
import { withinTimeout } from './handler-timeout.ts';
import { parseRecord } from './parse.ts';
import { failInTransaction, failureOf, scheduleRetry, type ScheduledRetry } from './settle.ts';
import type { StepDeps } from './step-deps.ts';
import { loadRecord } from '../records/stored-record.ts';

/** What a drain applied per aggregate, and the durable retries it scheduled for successors that failed. */
export interface DrainResult {
  counts: Map<string, number>;
  retries: Map<string, ScheduledRetry>;
}

/**
 * Applies parked successors of just-applied aggregates in version order, stopping at the first gap. Alone in
 * its transaction (`single`), each successor runs in a savepoint: a permanent error puts it in the failure store,
 * a transient one gives it a durable retry of its own (ledger row + block, in this transaction) — never the
 * predecessor's failure, which did apply.
 * In a batch transaction a successor's error rolls the batch back, and the per-event fallback decides.
 */
export async function drain(
  deps: StepDeps,
  tx: Tx,
  aggregates: string[],
  versions: Map<string, number>,
  single: boolean,
): Promise<DrainResult> {
  const consumer = deps.definition.name;
  const counts = new Map<string, number>();
  const retries = new Map<string, ScheduledRetry>();
  const done: Array<{ aggregate_id: string; aggregate_version: number }> = [];
  const stopped = new Set<string>();
  for (const row of await parkedOf(tx, consumer, aggregates)) {
    if (stopped.has(row.aggregate_id)) continue;
    const last = versions.get(row.aggregate_id)!;
    if (row.aggregate_version <= last) {
      done.push(row); // superseded: that version was applied by another path
      continue;
    }
    if (row.aggregate_version !== last + 1) {
      stopped.add(row.aggregate_id);
      continue;
    }
    const record = loadRecord(row.record);
    const parsed = parseRecord(record, deps.definition);
    if (!parsed.ok) {
      // Parked only after parsing, so this means the consumer's accepted schemas changed since.
      await failInTransaction(tx, deps, record, { ...parsed, envelope: parsed.envelope });
      done.push(row);
      stopped.add(row.aggregate_id);
      continue;
    }
    const context = { consumer, partition: record.partition, offset: record.offset, attempt: 1 };
    const run = (q: Tx) =>
      withinTimeout(() => deps.handler(parsed.envelope, q, context), deps.definition.limits.handlerTimeoutMs);
    if (single) {
      try {
        await tx.savepoint(async (sp) => {
          await run(sp as unknown as Tx);
          // Outbox rows the handler wrote in the savepoint are the transaction's: its commit nudges the relays.
          if (isDirty(sp)) markDirty(tx, dirtyLanes(sp));
        });
      } catch (cause) {
        const c = classify(cause);
        const durable = deps.durable === true;
        // Taken in when it was parked, not applied now: its retry or replay must find it new.
        if (c.kind === 'permanent' || durable) await forgetInbox(tx, consumer, parsed.envelope.event_id);
        if (c.kind === 'permanent') {
          await failInTransaction(tx, deps, record, failureOf(parsed.envelope, cause, c.code));
        } else {
          if (!durable) throw cause;
          const settled = await scheduleRetry(tx, deps, record, parsed.envelope, { cause, code: c.code, attempt: 1 });
          if ('retry' in settled) retries.set(row.aggregate_id, settled.retry);
        }
        done.push(row);
        stopped.add(row.aggregate_id);
        continue;
      }
    } else {
      await run(tx);
    }
    versions.set(row.aggregate_id, row.aggregate_version);
    counts.set(row.aggregate_id, (counts.get(row.aggregate_id) ?? 0) + 1);
    done.push(row);
  }
  await deleteParked(tx, consumer, done);
  return { counts, retries };
}
