import type { Sql } from '../db/connect.ts';
import { BrokerError, type PostboxError } from '../errors.ts';
import { claimLaneBatch, type ClaimedRow } from '../queries/outbox-claim.ts';
import {
  endSending,
  markFailed,
  markPublished,
  reschedule,
  type PublishedPosition,
  type SettledRow,
} from '../queries/outbox-settle.ts';
import type { OutboundMessage, Publisher, PublishOutcome } from '../ports/publisher.ts';
import { backoffDelayMs } from '../retry/backoff.ts';
import { failpoint } from '../testing/failpoint.ts';
import { recordSendSpan, tracingOff, type SentMessage } from '../telemetry/tracing.ts';
import type { RelayOptions } from './options.ts';
import { recordBytes, toRecord } from './record.ts';

/**
 * One unit of relay work: a batch from the heads of one or more lanes (never a lane in two cycles at once). Small
 * and structured-clone friendly (it crosses threads).
 */
export interface LaneTask {
  lanes: number[];
  owner: string;
}

export interface CycleResult {
  lanes: number[];
  claimed: number;
  /** The claim stopped at a limit (batchSize or maxBatchBytes): its lanes may hold more rows ready now. */
  full: boolean;
  /** Rows claimed per lane (lanes that had none are absent). */
  claimedByLane: Record<number, number>;
  published: number;
  rescheduled: number;
  failed: number;
  /**
   * Set when lanes must wait before their next claim (a transient failure): `pausedLanes`, those of the rows
   * returned to pending; keeps each lane's order.
   */
  pauseMs: number | null;
  pausedLanes: number[];
  /** The first error seen, for the relay's log (no payloads in it), with the event it happened to. */
  error: { code: string; kind: string; message: string; event?: FailedEvent } | null;
  /**
   * Per topic, what this cycle's publish did, for the relay's metrics. They are recorded on the main thread
   * (telemetry/metrics.ts): a cycle may run in a worker thread, whose meters no exporter reads.
   */
  sent?: TopicSendReport[];
  /** Duration of the broker call, ms; null when nothing was sent. */
  publishMs?: number | null;
  /** Events that ended `failed` in this cycle (the first 20), for the relay's log. */
  failedEvents?: FailedEvent[];
}

export interface TopicSendReport {
  topic: string;
  confirmed: number;
  /** Per confirmed message: from occurred_at to the confirmation, ms. */
  confirmAgesMs: number[];
  /** Unconfirmed messages by error code: returned to pending, ended `failed`, or (of those) never sent at all. */
  errors: Array<{ code: string; rescheduled: number; failed: number; refused: number }>;
}

export interface FailedEvent {
  event_id: string;
  aggregate_id: string;
  aggregate_version: number;
  topic: string;
  error_code: string;
}

const FAILED_EVENTS_LOGGED = 20;

export interface CycleDeps {
  sql: Sql;
  publisher: Publisher;
  options: RelayOptions;
}

/**
 * claim (one statement: reads the lanes' heads, records the batch in flight per lane) → publish outside any
 * transaction → settle: confirmed rows are marked published with their position; a transient or unknown failure
 * returns the rows to pending after a jittered backoff and pauses the lane for as long, so nothing of the lane
 * overtakes them; a permanent failure, or a row out of attempts, ends in `failed`. A crash anywhere leaves the
 * rows `publishing` (pending, inside the lane's batch in flight) until the batch's lease ends and the lane's next
 * owner re-sends them with the same event_id: the counted duplicate window.
 */
export async function runLaneCycle(deps: CycleDeps, task: LaneTask): Promise<CycleResult> {
  const { sql, publisher, options } = deps;
  const result: CycleResult = {
    lanes: task.lanes,
    claimed: 0,
    full: false,
    claimedByLane: {},
    published: 0,
    rescheduled: 0,
    failed: 0,
    pauseMs: null,
    pausedLanes: [],
    error: null,
  };
  const rows = await claimLaneBatch(sql, {
    lanes: task.lanes,
    owner: task.owner,
    limit: options.batchSize,
    maxBytes: options.maxBatchBytes,
    leaseMs: options.leaseMs,
  });
  result.claimed = rows.length;
  result.full = rows.length >= options.batchSize || payloadBytes(rows) >= options.maxBatchBytes;
  if (rows.length === 0) return result;
  for (const row of rows) result.claimedByLane[row.lane!] = (result.claimedByLane[row.lane!] ?? 0) + 1;
  const claimedLanes = Object.keys(result.claimedByLane).map(Number);

  const oversize: ClaimedRow[] = [];
  const sendable: ClaimedRow[] = [];
  const messages: OutboundMessage[] = [];
  for (const row of rows) {
    const message = toRecord(row);
    if (recordBytes(message) > options.maxMessageBytes) oversize.push(row);
    else {
      sendable.push(row);
      messages.push(message);
    }
  }
  const report = new SendReport();
  if (oversize.length > 0) {
    result.failed += await markFailed(
      sql,
      oversize.map(settled),
      task.owner,
      `message_too_large: over ${options.maxMessageBytes} bytes`,
    );
    for (const row of oversize) report.failed(row, 'message_too_large', true);
  }

  const started = Date.now();
  const outcomes =
    messages.length === 0 ? [] : await publishWithin(publisher, messages, Math.floor(options.leaseMs / 2));
  const confirmedAt = Date.now();
  if (messages.length > 0) result.publishMs = confirmedAt - started;
  const positions: PublishedPosition[] = [];
  const retry: ClaimedRow[] = [];
  const failed: ClaimedRow[] = [];
  let firstError: PostboxError | null = null;
  // What the send span needs, gathered only when a tracer provider is registered.
  const spanned: SentMessage[] | null = tracingOff() ? null : [];
  const traced = (row: ClaimedRow, result: Pick<SentMessage, 'partition' | 'offset' | 'error'>) =>
    spanned?.push({
      event_id: row.event_id,
      aggregate_id: row.aggregate_id,
      topic: row.topic,
      traceparent: row.traceparent,
      tracestate: row.tracestate,
      ...result,
    });
  outcomes.forEach((outcome, i) => {
    const row = sendable[i]!;
    if (outcome.ok) {
      positions.push({
        event_id: row.event_id,
        partition: outcome.confirmation.partition,
        offset: outcome.confirmation.offset ?? null,
        attempts: row.attempts,
      });
      const { partition, offset } = outcome.confirmation;
      traced(row, { partition, ...(offset === undefined ? {} : { offset }) });
      report.confirmed(row, confirmedAt - row.occurred_at.getTime());
      return;
    }
    firstError ??= outcome.error;
    traced(row, { error: outcome.error.code });
    const limit = Math.min(
      options.maxAttempts,
      outcome.error instanceof BrokerError ? (outcome.error.permanentAfter ?? Infinity) : Infinity,
    );
    if (outcome.error.kind === 'permanent' || row.attempts >= limit) {
      failed.push(row);
      report.failed(row, outcome.error.code);
    } else {
      retry.push(row);
      report.rescheduled(row, outcome.error.code);
    }
  });
  if (spanned) recordSendSpan(task.lanes.length === 1 ? task.lanes[0]! : null, started, spanned);

  if (positions.length > 0) failpoint('relay.after-publish-before-mark');
  result.published = await markPublished(sql, positions, claimedLanes, task.owner);
  if (failed.length > 0) {
    result.failed += await markFailed(sql, failed.map(settled), task.owner, describe(firstError!, failed[0]!.attempts));
  }
  if (retry.length > 0) {
    const attempt = Math.max(...retry.map((r) => r.attempts)) - 1;
    const delay = backoffDelayMs(attempt, options.backoff);
    result.rescheduled = await reschedule(
      sql,
      retry.map(settled),
      task.owner,
      delay,
      describe(firstError!, attempt + 1),
    );
    result.pauseMs = delay;
    result.pausedLanes = [...new Set(retry.map((r) => r.lane!))];
  }
  // Nothing confirmed, so no mark ended the batch in flight: end it, or the lanes' next claim counts an attempt.
  if (positions.length === 0) await endSending(sql, claimedLanes, task.owner);
  if (firstError) {
    const e: PostboxError = firstError;
    const first = sendable[outcomes.findIndex((o) => !o.ok)];
    result.error = {
      code: e.code,
      kind: e.kind,
      message: e.message,
      ...(first ? { event: failedEvent(first, e.code) } : {}),
    };
  }
  result.sent = report.topics();
  result.failedEvents = report.failedEvents;
  return result;
}

function settled(row: ClaimedRow): SettledRow {
  return { event_id: row.event_id, attempts: row.attempts };
}

function failedEvent(row: ClaimedRow, code: string): FailedEvent {
  return {
    event_id: row.event_id,
    aggregate_id: row.aggregate_id,
    aggregate_version: Number(row.aggregate_version),
    topic: row.topic,
    error_code: code,
  };
}

/** Counts per topic and error for CycleResult.sent. */
class SendReport {
  readonly #topics = new Map<string, TopicSendReport>();
  readonly failedEvents: FailedEvent[] = [];

  confirmed(row: ClaimedRow, ageMs: number): void {
    const t = this.#topic(row.topic);
    t.confirmed++;
    t.confirmAgesMs.push(ageMs);
  }

  rescheduled(row: ClaimedRow, code: string): void {
    this.#error(row.topic, code).rescheduled++;
  }

  failed(row: ClaimedRow, code: string, refused = false): void {
    const e = this.#error(row.topic, code);
    e.failed++;
    if (refused) e.refused++;
    if (this.failedEvents.length < FAILED_EVENTS_LOGGED) this.failedEvents.push(failedEvent(row, code));
  }

  topics(): TopicSendReport[] {
    return [...this.#topics.values()];
  }

  #error(topic: string, code: string): TopicSendReport['errors'][number] {
    const t = this.#topic(topic);
    let e = t.errors.find((x) => x.code === code);
    if (!e) {
      e = { code, rescheduled: 0, failed: 0, refused: 0 };
      t.errors.push(e);
    }
    return e;
  }

  #topic(topic: string): TopicSendReport {
    let t = this.#topics.get(topic);
    if (!t) {
      t = { topic, confirmed: 0, confirmAgesMs: [], errors: [] };
      this.#topics.set(topic, t);
    }
    return t;
  }
}

/**
 * The lease must outlast the publish, so the publish gets half the lease. Past that the outcome is unknown (the
 * broker may still store the records): the rows are retried with the same ids, and consumers absorb a duplicate.
 * The publisher keeps the deadline itself (abandoning a producer that overran it); this timer, a second later,
 * only guards against a publisher that does not.
 */
async function publishWithin(
  publisher: Publisher,
  messages: OutboundMessage[],
  timeoutMs: number,
): Promise<PublishOutcome[]> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<PublishOutcome[]>((resolve) => {
    timer = setTimeout(() => {
      const error = new BrokerError(
        'publish_timeout',
        'unknown',
        `publish did not complete within ${timeoutMs} ms (half the lease)`,
      );
      resolve(messages.map(() => ({ ok: false, error })));
    }, timeoutMs + 1000);
  });
  try {
    return await Promise.race([publisher.publish(messages, { timeoutMs }), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function describe(error: PostboxError, attempts: number): string {
  return `${error.code} (${error.kind}, attempt ${attempts}): ${error.message}`.slice(0, 2000);
}

function payloadBytes(rows: ClaimedRow[]): number {
  let bytes = 0;
  for (const row of rows) bytes += row.payload.length;
  return bytes;
}
