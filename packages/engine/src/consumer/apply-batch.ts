import type { Sql, Tx } from '../db/connect.ts';
import type { Envelope } from '../envelope/envelope.ts';
import type { PostboxError } from '../errors.ts';
import { blockAggregate } from '../queries/consumer-blocked.ts';
import { scheduleRetry } from '../queries/retry-ledger.ts';
import { settleRetriedFailure } from '../queries/retry-settle.ts';
import { nextRetry } from '../retry/budget.ts';
import { classify, IMMEDIATE_RETRIES } from '../retry/classify.ts';
import { toLedgerRecord } from '../retry/ledger-record.ts';
import { deleteParked, parkedOf, parkEvents, type ParkedRow, type StoredRecord } from '../queries/consumer-parked.ts';
import { lockAggregates, saveVersions } from '../queries/consumer-version.ts';
import { insertFailure } from '../queries/failure-insert.ts';
import { forgetInbox, insertInbox } from '../queries/inbox-insert.ts';
import { fingerprint } from '../envelope/fingerprint.ts';
import { withinTimeout } from './handler-timeout.ts';
import type { InboundRecord } from '../ports/subscriber.ts';
import type { ConsumerDefinition } from './definition.ts';
import type { Handler } from './handler.ts';
import { parseRecord } from './parse.ts';
import { ProcessSpans } from '../telemetry/process-spans.ts';
import { scrubPayload } from '../telemetry/redact.ts';
import { expectedVersion, gate } from './version-gate.ts';
import { decodeTask, type ConsumeTask, type ConsumeTaskResult, type RecordResult, type WireRecord } from './wire.ts';

/**
 * The consume step, run in a worker thread (or inline): one task = events of distinct aggregates.
 *
 *   parse every record (poison → failure store + block, in its own transaction)
 *   BEGIN
 *     lock the aggregates' version rows (created at 0 when new) — serialises double owners
 *     INSERT inbox … ON CONFLICT DO NOTHING → not inserted = duplicate, nothing else happens
 *     per event: version gate → ignore | park (durable) | apply: handler(event, tx), then drain parked v+1, v+2, …
 *     save versions, delete drained parked rows
 *   COMMIT
 *   the batch transaction failed → every event again in its own transaction, so one poison event never rolls
 *   back its neighbours; there a permanent error (retry/classify.ts) goes to the failure store, a serialization
 *   failure or deadlock is retried at once a few times, and any other error is transient: with durable retries
 *   (task.durable) a retry ledger row and the aggregate's block are written in one transaction — the offset can
 *   move on — otherwise the consumer retries it in memory.
 * A due retry (record.retry) whose event blocks its own aggregate lifts the block in its transaction, so the
 * parked successors drain right after it.
 */
export interface ConsumeStepDeps {
  sql: Sql;
  handler: Handler;
  definition: Pick<ConsumerDefinition, 'name' | 'firstVersion' | 'schemaVersions' | 'limits' | 'retry'> & Partial<Pick<ConsumerDefinition, 'groupId'>>;
}

/** The step's own view: the handler runs inside each event's process span. */
interface StepDeps extends ConsumeStepDeps {
  spans: ProcessSpans;
  /** Retries are durable (ledger + scheduler) for this task. */
  durable?: boolean;
}

interface ValidEvent {
  index: number;
  record: WireRecord;
  envelope: Envelope;
}

export async function consumeBatch(deps: ConsumeStepDeps, task: ConsumeTask): Promise<ConsumeTaskResult> {
  const records = decodeTask(task);
  const spans = new ProcessSpans(records, { consumer: deps.definition.name, groupId: deps.definition.groupId }, task.traceparent);
  try {
    const result = await consumeRecords({ ...deps, handler: spans.wrap(deps.handler), spans, durable: task.durable === true }, task, records);
    spans.end(result.results);
    return result;
  } catch (cause) {
    spans.fail(classify(cause).code);
    throw cause;
  }
}

async function consumeRecords(deps: StepDeps, task: ConsumeTask, records: WireRecord[]): Promise<ConsumeTaskResult> {
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
      const batch = await deps.sql.begin((tx) => applyEvents(deps, tx, valid, false));
      for (let i = 0; i < valid.length; i++) results[valid[i]!.index] = batch[i]!;
      return { results };
    } catch {
      // One of them failed: each alone below decides whose, and what it is.
    }
  }
  for (const event of valid) results[event.index] = await applyOne(deps, event, task.durable === true);
  return { results };
}

/** One event in its own transaction, with immediate retries of serialization failures and deadlocks. */
async function applyOne(deps: StepDeps, event: ValidEvent, durable: boolean): Promise<RecordResult> {
  for (let immediate = 0; ; immediate++) {
    try {
      const [one] = await deps.sql.begin((tx) => applyEvents(deps, tx, [event], true));
      return one!;
    } catch (cause) {
      const c = classify(cause);
      if (c.kind === 'permanent') return settleFailure(deps, event.record, failureOf(event.envelope, cause, c.code));
      if (c.immediate && immediate < IMMEDIATE_RETRIES) continue;
      // A due retry's next step is decided by its ledger row (retry/process-retry.ts), not here.
      if (!durable || event.record.retry) return transient(cause, c.code, event.envelope);
      return scheduleRetryOf(deps, event, cause, c.code);
    }
  }
}

/**
 * The first durable retry of an event: the budget decides; a retry is a ledger row plus the aggregate's block,
 * one transaction, so the offset may be committed after it. Past the event's deadline or with no attempts left
 * it goes to the failure store instead. If even that cannot be written, the consumer holds it in memory.
 */
async function scheduleRetryOf(deps: StepDeps, event: ValidEvent, cause: unknown, code: string): Promise<RecordResult> {
  const { envelope, record } = event;
  const consumer = deps.definition.name;
  const detail = errorDetail(cause, envelope);
  const now = Date.now();
  const deadline = envelope.deadline ? Date.parse(envelope.deadline) : null;
  const decision = nextRetry({ attempt: record.attempt, firstFailedAt: now, now, deadline, budget: deps.definition.retry });
  if (decision.action !== 'retry') {
    const expired = decision.action === 'expired';
    return settleFailure(deps, record, {
      ...failureOf(envelope, cause, expired ? 'expired' : code),
      detail: expired ? `deadline ${envelope.deadline} passed; last error: ${detail}` : `retry budget spent (${decision.reason}) after ${record.attempt} attempt(s): ${detail}`,
      attempts: record.attempt,
      status: expired ? 'expired' : 'open',
    });
  }
  try {
    const dueAt = await deps.sql.begin(async (tx) => {
      const at = await scheduleRetry(tx, {
        consumer, eventId: envelope.event_id, aggregateId: envelope.aggregate_id, aggregateVersion: envelope.aggregate_version,
        topic: record.topic, record: toLedgerRecord(record), attempt: record.attempt + 1, delayMs: decision.delayMs,
        deadline: deadline === null ? null : new Date(deadline), errorCode: code, error: detail,
      });
      await blockAggregate(tx, consumer, { aggregate_id: envelope.aggregate_id, event_id: envelope.event_id, aggregate_version: envelope.aggregate_version, reason: 'retrying', detail: `${code}: ${detail}` });
      return at;
    });
    const traceparent = deps.spans.traceparentOf(envelope.event_id);
    return { outcome: 'scheduled', drained: 0, code, detail, retry: { eventId: envelope.event_id, attempt: record.attempt + 1, dueAt: dueAt.getTime(), ...(traceparent ? { traceparent } : {}) } };
  } catch {
    return transient(cause, code, envelope);
  }
}

async function applyEvents(deps: StepDeps, tx: Tx, events: ValidEvent[], single: boolean): Promise<RecordResult[]> {
  const consumer = deps.definition.name;
  const policy = deps.definition.firstVersion;
  const states = await lockAggregates(tx, consumer, events.map((e) => e.envelope.aggregate_id));
  const blocks = (e: ValidEvent) => {
    const by = states.get(e.envelope.aggregate_id)?.blockedBy;
    return typeof by === 'string' && (by === e.envelope.event_id || by === e.record.headers.ce_replaces);
  };
  // A due retry (or replay) of the head of a block lifts it; its successors drain after it below.
  for (const e of events) {
    if (!e.record.retry || !blocks(e)) continue;
    await settleRetriedFailure(tx, consumer, e.envelope.aggregate_id, [e.envelope.event_id, ...(e.record.headers.ce_replaces ? [e.record.headers.ce_replaces] : [])]);
    states.get(e.envelope.aggregate_id)!.blockedBy = undefined;
  }
  // The blocking event itself, delivered again by the broker, waits in the ledger or the failure store: absorbed.
  const isBlocker = blocks;
  const intake = events.filter((e) => !isBlocker(e));
  const verdicts = await insertInbox(
    tx,
    consumer,
    intake.map((e) => ({ event_id: e.envelope.event_id, aggregate_id: e.envelope.aggregate_id, aggregate_version: e.envelope.aggregate_version, fingerprint: fingerprint(e.record) })),
  );
  const verdictOf = new Map(intake.map((e, i) => [e, verdicts[i]!]));
  const results: RecordResult[] = [];
  const versions = new Map<string, number>();
  const park: ParkedRow[] = [];
  const applied: string[] = [];
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
    const decision = state.blockedBy !== undefined ? 'park' : gate(last, envelope.aggregate_version, policy);
    if (decision === 'ignore') {
      results.push({ outcome: 'ignored', drained: 0 });
    } else if (decision === 'park') {
      park.push({ aggregate_id: envelope.aggregate_id, aggregate_version: envelope.aggregate_version, event_id: envelope.event_id, expected_version: expectedVersion(last), record: storeRecord(record) });
      results.push({ outcome: 'parked', drained: 0 });
    } else {
      toApply.push(event);
      versions.set(envelope.aggregate_id, envelope.aggregate_version);
      applied.push(envelope.aggregate_id);
      results.push({ outcome: 'applied', drained: 0 });
    }
  }
  await runHandlers(deps, tx, toApply);
  if (applied.length > 0) {
    const { counts, retries } = await drain(deps, tx, applied, versions, single);
    for (let i = 0; i < events.length; i++) {
      const aggregate = events[i]!.envelope.aggregate_id;
      if (results[i]!.outcome !== 'applied') continue;
      const n = counts.get(aggregate);
      if (n) results[i]!.drained = n;
      const later = retries.get(aggregate);
      if (later) results[i]!.successorRetries = [later];
    }
  }
  await parkEvents(tx, consumer, park);
  await saveVersions(tx, consumer, versions);
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
  const run = (e: ValidEvent) => withinTimeout(() => deps.handler(e.envelope, tx, { consumer, partition: e.record.partition, offset: e.record.offset, attempt: e.record.attempt }), limit);
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

/**
 * Applies parked successors of just-applied aggregates in version order, stopping at the first gap. Alone in
 * its transaction (`single`), each successor runs in a savepoint: a permanent error puts it in the failure store,
 * a transient one gives it a durable retry of its own (ledger row + block, in this transaction) — never the
 * predecessor's failure, which did apply (a successor's error once failed the predecessor's retry with it).
 */
async function drain(deps: StepDeps, tx: Tx, aggregates: string[], versions: Map<string, number>, single: boolean): Promise<{ counts: Map<string, number>; retries: Map<string, { eventId: string; attempt: number; dueAt: number }> }> {
  const consumer = deps.definition.name;
  const counts = new Map<string, number>();
  const retries = new Map<string, { eventId: string; attempt: number; dueAt: number }>();
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
    const run = (q: Tx) => withinTimeout(() => deps.handler(parsed.envelope, q, { consumer, partition: record.partition, offset: record.offset, attempt: 1 }), deps.definition.limits.handlerTimeoutMs);
    if (single) {
      try {
        await tx.savepoint((sp) => run(sp as unknown as Tx));
      } catch (cause) {
        const c = classify(cause);
        // Taken in when it was parked, not applied now: its retry or replay must find it new.
        if (c.kind === 'permanent' || durableDrain(deps)) await forgetInbox(tx, consumer, parsed.envelope.event_id);
        if (c.kind !== 'permanent') {
          const retry = durableDrain(deps) ? await scheduleSuccessorRetry(deps, tx, record, parsed.envelope, cause, c.code) : null;
          if (!retry) throw cause;
          if (retry !== 'failed') retries.set(row.aggregate_id, retry);
        } else {
          await failInTransaction(tx, deps, record, failureOf(parsed.envelope, cause, c.code));
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

function durableDrain(deps: StepDeps): boolean {
  return deps.durable === true;
}

/**
 * A drained successor's first failure, in the predecessor's transaction: the budget decides between a ledger row
 * (plus the block, so later versions park behind it) and the failure store. 'failed' when it went there.
 */
async function scheduleSuccessorRetry(deps: StepDeps, tx: Tx, record: InboundRecord, envelope: Envelope, cause: unknown, code: string): Promise<{ eventId: string; attempt: number; dueAt: number } | 'failed'> {
  const consumer = deps.definition.name;
  const detail = errorDetail(cause, envelope);
  const now = Date.now();
  const deadline = envelope.deadline ? Date.parse(envelope.deadline) : null;
  const decision = nextRetry({ attempt: 1, firstFailedAt: now, now, deadline, budget: deps.definition.retry });
  if (decision.action !== 'retry') {
    const expired = decision.action === 'expired';
    await failInTransaction(tx, deps, record, {
      ...failureOf(envelope, cause, expired ? 'expired' : code),
      detail: expired ? `deadline ${envelope.deadline} passed; last error: ${detail}` : `retry budget spent (${decision.reason}) after 1 attempt(s): ${detail}`,
      status: expired ? 'expired' : 'open',
    });
    return 'failed';
  }
  const dueAt = await scheduleRetry(tx, {
    consumer, eventId: envelope.event_id, aggregateId: envelope.aggregate_id, aggregateVersion: envelope.aggregate_version,
    topic: record.topic, record: toLedgerRecord(record), attempt: 2, delayMs: decision.delayMs,
    deadline: deadline === null ? null : new Date(deadline), errorCode: code, error: detail,
  });
  await blockAggregate(tx, consumer, { aggregate_id: envelope.aggregate_id, event_id: envelope.event_id, aggregate_version: envelope.aggregate_version, reason: 'retrying', detail: `${code}: ${detail}` });
  return { eventId: envelope.event_id, attempt: 2, dueAt: dueAt.getTime() };
}

interface Failure {
  code: string;
  detail: string;
  envelope?: Envelope | undefined;
  eventId: string | null;
  eventType: string | null;
  aggregateId: string | null;
  aggregateVersion: number | null;
  /** @defaultValue 1 */
  attempts?: number;
  /** @defaultValue 'open' */
  status?: 'open' | 'expired';
}

function failureOf(envelope: Envelope, cause: unknown, code: string): Failure {
  return {
    code,
    detail: errorDetail(cause, envelope),
    envelope,
    eventId: envelope.event_id,
    eventType: envelope.event_type,
    aggregateId: envelope.aggregate_id,
    aggregateVersion: envelope.aggregate_version,
  };
}

/** A permanent failure, in its own transaction: failure row with the raw bytes, and the aggregate blocked. */
async function settleFailure(deps: StepDeps, record: InboundRecord, failure: Failure): Promise<RecordResult> {
  try {
    await deps.sql.begin((tx) => failInTransaction(tx, deps, record, failure));
    return { outcome: 'failed', drained: 0, code: failure.code, detail: failure.detail };
  } catch (cause) {
    return transient(cause, classify(cause).code, failure.envelope);
  }
}

async function failInTransaction(tx: Tx, deps: StepDeps, record: InboundRecord, f: Failure): Promise<void> {
  const consumer = deps.definition.name;
  await insertFailure(tx, consumer, {
    event_id: f.eventId,
    event_type: f.eventType,
    aggregate_id: f.aggregateId,
    aggregate_version: f.aggregateVersion,
    topic: record.topic,
    partition: record.partition,
    offset: record.offset,
    payload: record.value ? Buffer.from(record.value) : null,
    headers: record.headers,
    envelope: f.envelope,
    error_code: f.code,
    error_detail: f.detail,
    attempts: f.attempts ?? 1,
    status: f.status ?? 'open',
  });
  if (f.aggregateId) {
    await blockAggregate(tx, consumer, { aggregate_id: f.aggregateId, event_id: f.eventId, aggregate_version: f.aggregateVersion, reason: 'failed', detail: `${f.code}: ${f.detail}` });
  }
}

/**
 * The same event_id with other content than the event taken in before: a producer reused an id. Never absorbed
 * as a duplicate: stored in the failure store (raw bytes kept) and not applied; the aggregate is not blocked
 * (the event of that id was applied, or is still coming, with its own content).
 */
async function conflictFailure(tx: Tx, deps: StepDeps, event: ValidEvent): Promise<RecordResult> {
  const detail = `event_id ${event.envelope.event_id} was taken in before with other content (type, versions, key or data differ): a producer reused the id; this delivery was not applied`;
  await insertFailure(tx, deps.definition.name, {
    event_id: event.envelope.event_id,
    event_type: event.envelope.event_type,
    aggregate_id: event.envelope.aggregate_id,
    aggregate_version: event.envelope.aggregate_version,
    topic: event.record.topic,
    partition: event.record.partition,
    offset: event.record.offset,
    payload: event.record.value ? Buffer.from(event.record.value) : null,
    headers: event.record.headers,
    envelope: event.envelope,
    error_code: 'event_id_conflict',
    error_detail: detail,
  });
  return { outcome: 'failed', drained: 0, code: 'event_id_conflict', detail };
}

/**
 * An error's text as stored and logged: a handler's (or its statement's) error may quote the event's data, so
 * the data's values are taken out of it (telemetry/redact.ts) before it leaves the worker.
 */
function errorDetail(cause: unknown, envelope?: Envelope): string {
  const error = cause as PostboxError | undefined;
  return scrubPayload(String(error?.message ?? cause), envelope?.data).slice(0, 2000);
}

function transient(cause: unknown, code: string, envelope?: Envelope): RecordResult {
  return { outcome: 'transient', drained: 0, code, detail: errorDetail(cause, envelope) };
}

function storeRecord(r: WireRecord): StoredRecord {
  return { topic: r.topic, partition: r.partition, offset: r.offset, key: r.key, value: r.value ? Buffer.from(r.value).toString('base64') : null, headers: r.headers };
}

function loadRecord(r: StoredRecord): InboundRecord {
  return { topic: r.topic, partition: r.partition, offset: r.offset, key: r.key, value: r.value === null ? null : Buffer.from(r.value, 'base64'), headers: r.headers };
}
