import type { Tx } from '../db/connect.ts';
import { transaction } from '../outbox/transaction.ts';
import { classify, IMMEDIATE_RETRIES } from '../retry/classify.ts';
import { ProcessSpans } from '../telemetry/process-spans.ts';
import { applyEvents } from './apply.ts';
import { parseRecord } from './parse.ts';
import { errorDetail, failureOf, scheduleRetry, settleFailure, transient } from './settle.ts';
import type { ConsumeStepDeps, StepDeps, ValidEvent } from './step-deps.ts';
import {
  decodeTask,
  type ConsumeTask,
  type ConsumeTaskResult,
  type RecordResult,
  type WireRecord,
} from '../records/wire.ts';

export type { ConsumeStepDeps } from './step-deps.ts';

/**
 * The consume step, run in a worker thread (or inline): one task = events of distinct aggregates.
 *
 *   parse every record (poison → failure store + block, in its own transaction)
 *   one transaction for all valid events (apply.ts)
 *   the batch transaction failed → every event again in its own transaction, so one poison event never rolls
 *   back its neighbours; there a permanent error (retry/classify.ts) goes to the failure store, a serialization
 *   failure or deadlock is retried at once a few times, and any other error is transient: with durable retries
 *   (task.durable) a retry ledger row and the aggregate's block are written in one transaction — the offset can
 *   move on — otherwise the consumer retries it in memory.
 * A due retry (record.retry) whose event blocks its own aggregate lifts the block in its transaction, so the
 * parked successors drain right after it.
 */
export async function consumeBatch(deps: ConsumeStepDeps, task: ConsumeTask): Promise<ConsumeTaskResult> {
  const records = decodeTask(task);
  const scope = { consumer: deps.definition.name, groupId: deps.definition.groupId };
  const spans = new ProcessSpans(records, scope, task.traceparent);
  try {
    const stepDeps: StepDeps = { ...deps, handler: spans.wrap(deps.handler), spans, durable: task.durable === true };
    const result = await consumeRecords(stepDeps, records);
    spans.end(result.results);
    return result;
  } catch (cause) {
    spans.fail(classify(cause).code);
    throw cause;
  }
}

async function consumeRecords(deps: StepDeps, records: WireRecord[]): Promise<ConsumeTaskResult> {
  const results: RecordResult[] = new Array(records.length);
  const valid: ValidEvent[] = [];
  for (let i = 0; i < records.length; i++) {
    const record = records[i]!;
    const parsed = parseRecord(record, deps.definition);
    if (parsed.ok) {
      valid.push({ index: i, record, envelope: parsed.envelope });
      continue;
    }
    results[i] = await settleFailure(deps, record, {
      code: parsed.code,
      detail: parsed.detail,
      envelope: parsed.envelope,
      eventId: parsed.eventId,
      eventType: parsed.eventType,
      aggregateId: parsed.aggregateId,
      aggregateVersion: parsed.aggregateVersion,
    });
  }
  if (valid.length === 0) return { results };
  if (valid.length > 1) {
    try {
      const batch = await commit(deps, (tx) => applyEvents(deps, tx, valid, false));
      for (let i = 0; i < valid.length; i++) results[valid[i]!.index] = batch[i]!;
      return { results };
    } catch {
      // One of them failed: each alone below decides whose, and what it is.
    }
  }
  for (const event of valid) results[event.index] = await applyOne(deps, event);
  return { results };
}

/**
 * The step's transaction around applied events: with a waker, relays are nudged after the commit when a handler
 * wrote outbox rows (outbox/transaction.ts), so a chained event or a saga's next step does not wait for the poll.
 */
function commit<T>(deps: StepDeps, fn: (tx: Tx) => Promise<T>): Promise<T> {
  if (deps.waker) return transaction(deps.sql, deps.waker, fn);
  return deps.sql.begin(fn) as Promise<T>;
}

/** One event in its own transaction, with immediate retries of serialization failures and deadlocks. */
async function applyOne(deps: StepDeps, event: ValidEvent): Promise<RecordResult> {
  for (let immediate = 0; ; immediate++) {
    try {
      const [one] = await commit(deps, (tx) => applyEvents(deps, tx, [event], true));
      return one!;
    } catch (cause) {
      const c = classify(cause);
      if (c.kind === 'permanent') return settleFailure(deps, event.record, failureOf(event.envelope, cause, c.code));
      if (c.immediate && immediate < IMMEDIATE_RETRIES) continue;
      // A due retry's next step is decided by its ledger row (process-retry.ts), not here.
      if (deps.durable !== true || event.record.retry) return transient(cause, c.code, event.envelope);
      return scheduleFirstRetry(deps, event, cause, c.code);
    }
  }
}

/**
 * An event's first durable retry, in a transaction of its own (scheduleRetry in settle.ts decides between the
 * ledger and the failure store). If even that cannot be written, the consumer holds the event in memory.
 */
async function scheduleFirstRetry(
  deps: StepDeps,
  event: ValidEvent,
  cause: unknown,
  code: string,
): Promise<RecordResult> {
  const { envelope, record } = event;
  try {
    const settled = await deps.sql.begin((tx) =>
      scheduleRetry(tx, deps, record, envelope, { cause, code, attempt: record.attempt }),
    );
    if ('failure' in settled) {
      return { outcome: 'failed', drained: 0, code: settled.failure.code, detail: settled.failure.detail };
    }
    return { outcome: 'scheduled', drained: 0, code, detail: errorDetail(cause, envelope), retry: settled.retry };
  } catch {
    return transient(cause, code, envelope);
  }
}
