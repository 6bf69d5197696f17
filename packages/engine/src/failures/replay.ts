import type { Sql } from '../db/connect.ts';
import { newEventId } from '../envelope/event-id.ts';
import { neutralHeaders } from '../envelope/headers.ts';
import type { PayloadKeyRing } from '../crypto/payload-keys.ts';
import { openFailure } from '../crypto/row-seal.ts';
import { ConfigError, PayloadKeyError, PostboxError } from '../errors.ts';
import { insertAudit } from '../queries/audit.ts';
import {
  aggregateState,
  listFailures,
  readFailure,
  type FailureDetail,
  type FailureFilter,
} from '../queries/failure-list.ts';
import { scheduleRetry } from '../queries/retry-ledger.ts';
import { storeRecord } from '../records/stored-record.ts';
import type { RetryJob, RetryScheduler } from '../ports/retry-scheduler.ts';
import { failpoint } from '../testing/failpoint.ts';
import { ATTR, POSTBOX_ATTR } from '../telemetry/attributes.ts';
import { creationLink } from '../telemetry/trace-context.ts';
import { activeTraceparent, inSpan } from '../telemetry/tracing.ts';

/**
 * Replay (docs/design.md §7): failures go back through the consumer's own engine-owned transaction by way of the retry
 * ledger — a ledger row due now (staggered by the rate limit) and its scheduler job — so replay needs no handler
 * in the operator's process and takes the same path, checks and dedup as every retry. The event keeps its id;
 * an edited payload becomes a new event (new id) that names the one it replaces (its `replaces` attribute). Every replayed
 * failure writes an audit record in the transaction that schedules it. A dry run checks and reports, and changes
 * nothing.
 */
export interface ReplayRequest {
  filter?: FailureFilter;
  /** @defaultValue 50; at most 1000 per call (small batches) */
  limit?: number;
  dryRun: boolean;
  actor: string;
  reason: string;
  /** Replays per second (due times are spread). @defaultValue 20 */
  ratePerSecond?: number;
  /** Replace the payload (a single failure only): the replay becomes a new event that references the old. */
  editedData?: unknown;
}

export type ReplayVerdict =
  | 'would_apply' // the aggregate is exactly one version behind: it applies and drains what is parked
  | 'would_park' // an earlier version is still missing: it parks until that arrives
  | 'would_ignore' // the consumer is already past this version
  | 'not_replayable' // no event to replay (bytes that never were an envelope), or not open
  | 'scheduled'; // (not a dry run) the replay is on the ledger

export interface ReplayItem {
  failureId: number;
  consumer: string;
  eventId: string | null;
  aggregateId: string | null;
  aggregateVersion: number | null;
  verdict: ReplayVerdict;
  detail: string;
  replayEventId?: string;
  dueAt?: Date;
}

/**
 * `schedulerFor` gives the retry scheduler of a consumer (each consumer has its own queue); null for a dry run.
 * `keys` opens sealed failures and seals the ledger rows a replay writes; a failure whose key is not in the ring
 * is not replayable, and says which key it needs.
 */
export async function replayFailures(
  sql: Sql,
  schedulerFor: ((consumer: string) => RetryScheduler) | null,
  request: ReplayRequest,
  keys: PayloadKeyRing | null = null,
): Promise<ReplayItem[]> {
  const limit = request.limit ?? 50;
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
    throw new ConfigError(`replay limit must be 1…1000, got ${limit}`);
  if (!request.reason?.trim()) throw new ConfigError('replay needs a reason (it is written to the audit log)');
  if (!request.dryRun && !schedulerFor)
    throw new ConfigError('replay needs the retry scheduler (REDIS_URL) unless it is a dry run');
  const rate = request.ratePerSecond ?? 20;
  const candidates = await listFailures(sql, { status: 'open', ...request.filter }, limit, null);
  if (request.editedData !== undefined && candidates.length !== 1) {
    throw new ConfigError(`an edited payload replays exactly one failure; the filter matched ${candidates.length}`);
  }
  // One span for the operator's action, a child of their request; each replayed event is a link to its creation,
  // and each scheduled retry links back here, so the replay is found from either side.
  const attributes = {
    [POSTBOX_ATTR.dryRun]: request.dryRun,
    [POSTBOX_ATTR.actor]: request.actor,
    [ATTR.batchCount]: candidates.length,
  };
  // The ledger row is the replay; the scheduler's job only its alarm. Once a consumer's Redis is found away (a
  // call failed by its deadline) the rest of its items go on the ledger without waiting for it again: the retry
  // reconciliation enqueues their jobs when Redis is back.
  const away = new Set<string>();
  const alarmFor =
    (consumer: string): Alarm =>
    async (job) => {
      if (away.has(consumer)) return false;
      try {
        await schedulerFor!(consumer).schedule(job);
        return true;
      } catch (cause) {
        if (!(cause instanceof PostboxError) || cause.code !== 'scheduler_unavailable') throw cause;
        away.add(consumer);
        return false;
      }
    };
  return inSpan('replay', { attributes }, async (span) => {
    const items: ReplayItem[] = [];
    let slot = 0;
    for (const summary of candidates.reverse()) {
      const stored = await readFailure(sql, summary.failure_id);
      if (!stored) continue;
      const failure = opened(keys, stored);
      if ('error' in failure) {
        items.push({ ...itemBase(stored), verdict: 'not_replayable', detail: failure.error });
        continue;
      }
      const link = creationLink(failure.headers?.traceparent, failure.headers?.tracestate, {
        [POSTBOX_ATTR.failureId]: failure.failure_id,
        [POSTBOX_ATTR.consumer]: failure.consumer_name,
        ...(failure.event_id ? { [ATTR.messageId]: failure.event_id } : {}),
      });
      if (link && span.isRecording()) span.addLink(link);
      const check = await verdictOf(sql, failure);
      if (request.dryRun || check.verdict === 'not_replayable') {
        items.push(check);
        continue;
      }
      const delayMs = Math.round((slot++ * 1000) / rate);
      items.push(
        await scheduleReplay(
          sql,
          alarmFor(failure.consumer_name),
          failure,
          check,
          request,
          delayMs,
          activeTraceparent(span),
          keys,
        ),
      );
    }
    if (span.isRecording())
      span.setAttribute('postbox.replay.scheduled', items.filter((i) => i.verdict === 'scheduled').length);
    return items;
  });
}

/** The failure with its payload, headers and envelope opened (a sealed row), or why they cannot be. */
function opened(keys: PayloadKeyRing | null, f: FailureDetail): FailureDetail | { error: string } {
  if (f.sealed === null) return f;
  try {
    return { ...f, ...openFailure(keys, f) } as FailureDetail;
  } catch (cause) {
    if (cause instanceof PayloadKeyError) return { error: cause.message };
    throw cause;
  }
}

function itemBase(f: FailureDetail): Omit<ReplayItem, 'verdict' | 'detail'> {
  return {
    failureId: f.failure_id,
    consumer: f.consumer_name,
    eventId: f.event_id,
    aggregateId: f.aggregate_id,
    aggregateVersion: f.aggregate_version,
  };
}

async function verdictOf(sql: Sql, f: FailureDetail): Promise<ReplayItem> {
  const base = itemBase(f);
  if (f.status !== 'open' && f.status !== 'expired')
    return { ...base, verdict: 'not_replayable', detail: `failure is ${f.status}` };
  if (!f.event_id || !f.aggregate_id || f.aggregate_version === null || !f.topic) {
    return {
      ...base,
      verdict: 'not_replayable',
      detail: `${f.error_code}: the bytes were never a valid event; fix the producer (the row stays for the record)`,
    };
  }
  if (f.payload_purged_at)
    return {
      ...base,
      verdict: 'not_replayable',
      detail: `the payload was removed by retention at ${f.payload_purged_at.toISOString()}`,
    };
  const state = await aggregateState(sql, f.consumer_name, f.aggregate_id);
  const last = state.last_version ?? 0;
  const parked = state.parked > 0 ? `, ${state.parked} parked version(s) would drain after it` : '';
  if (f.aggregate_version <= last)
    return {
      ...base,
      verdict: 'would_ignore',
      detail: `consumer is at version ${last}: already past ${f.aggregate_version}`,
    };
  if (f.aggregate_version === last + 1)
    return { ...base, verdict: 'would_apply', detail: `consumer is at version ${last}${parked}` };
  return {
    ...base,
    verdict: 'would_park',
    detail: `consumer is at version ${last}: version ${last + 1} is still missing`,
  };
}

/** Sets a retry's alarm; false when the scheduler is away (the ledger row stands, reconciliation arms it). */
type Alarm = (job: RetryJob) => Promise<boolean>;

async function scheduleReplay(
  sql: Sql,
  alarm: Alarm,
  f: FailureDetail,
  check: ReplayItem,
  request: ReplayRequest,
  delayMs: number,
  traceparent: string | undefined,
  keys: PayloadKeyRing | null,
): Promise<ReplayItem> {
  const headers = neutralHeaders(f.headers ?? {});
  let value = f.payload;
  let eventId = f.event_id!;
  if (request.editedData !== undefined) {
    eventId = newEventId();
    headers.replaces = f.event_id!;
    headers.id = eventId;
    value = Buffer.from(JSON.stringify(request.editedData), 'utf8');
  }
  const record = storeRecord({
    topic: f.topic!,
    partition: f.broker_partition ?? -1,
    offset: f.broker_offset ?? '-1',
    key: f.aggregate_id,
    headers,
    value,
  });
  const dueAt = await sql.begin(async (tx) => {
    const locked = await readFailure(tx, f.failure_id, true);
    if (!locked || (locked.status !== 'open' && locked.status !== 'expired')) return null;
    const at = await scheduleRetry(
      tx,
      {
        consumer: f.consumer_name,
        eventId,
        aggregateId: f.aggregate_id!,
        aggregateVersion: f.aggregate_version!,
        topic: f.topic!,
        record,
        attempt: 1,
        delayMs,
        deadline: null,
        errorCode: 'replay',
        error: `replay of failure ${f.failure_id} by ${request.actor}: ${request.reason}`,
        resetBudget: true,
      },
      keys,
    );
    await insertAudit(tx, {
      actor: request.actor,
      action: request.editedData === undefined ? 'failure.replay' : 'failure.replay_edited',
      reason: request.reason,
      target: `failure:${f.failure_id}`,
      before: {
        failure_id: f.failure_id,
        status: f.status,
        error_code: f.error_code,
        attempts: f.attempts,
        event_id: f.event_id,
        check: check.detail,
      },
      after: { scheduled_at: at, event_id: eventId, replaces_event_id: eventId === f.event_id ? null : f.event_id },
    });
    return at;
  });
  if (!dueAt) return { ...check, verdict: 'not_replayable', detail: 'failure changed while replaying' };
  failpoint('replay.mid-batch');
  const armed = await alarm({
    consumer: f.consumer_name,
    eventId,
    attempt: 1,
    dueAt: dueAt.getTime(),
    ...(traceparent ? { traceparent } : {}),
  });
  const detail = armed
    ? check.detail
    : [check.detail, 'Redis unreachable: the retry reconciliation enqueues its job'].filter(Boolean).join('; ');
  return { ...check, verdict: 'scheduled', replayEventId: eventId, dueAt, detail };
}
