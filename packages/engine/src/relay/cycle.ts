import type { Sql } from '../db/connect.ts';
import { BrokerError, type PostboxError } from '../errors.ts';
import { claimLaneBatch, type ClaimedRow } from '../queries/outbox-claim.ts';
import { markFailed, markPublished, reschedule, type PublishedPosition } from '../queries/outbox-settle.ts';
import type { OutboundMessage, Publisher, PublishOutcome } from '../ports/publisher.ts';
import { backoffDelayMs } from '../retry/backoff.ts';
import type { RelayOptions } from './options.ts';
import { recordBytes, toRecord } from './record.ts';

/** One unit of relay work: a batch from one lane. Small and structured-clone friendly (it crosses threads). */
export interface LaneTask {
  lane: number;
  owner: string;
}

export interface CycleResult {
  lane: number;
  claimed: number;
  published: number;
  rescheduled: number;
  failed: number;
  /** Set when the lane must wait before its next claim (a transient failure); keeps the lane's order. */
  pauseMs: number | null;
  /** The first error seen, for the relay's log (no payloads in it). */
  error: { code: string; kind: string; message: string } | null;
}

export interface CycleDeps {
  sql: Sql;
  publisher: Publisher;
  options: RelayOptions;
}

/**
 * claim (short transaction, committed) → publish outside any transaction → settle: confirmed rows are marked
 * published with their position; a transient or unknown failure returns the rows to pending after a jittered
 * backoff and pauses the lane for as long, so nothing of the lane overtakes them; a permanent failure, or a row
 * out of attempts, ends in `failed`. A crash anywhere leaves rows `publishing` until their lease ends and another
 * claim re-sends them with the same event_id: the counted duplicate window.
 */
export async function runLaneCycle(deps: CycleDeps, task: LaneTask): Promise<CycleResult> {
  const { sql, publisher, options } = deps;
  const result: CycleResult = { lane: task.lane, claimed: 0, published: 0, rescheduled: 0, failed: 0, pauseMs: null, error: null };
  const rows = await claimLaneBatch(sql, { lane: task.lane, owner: task.owner, limit: options.batchSize, leaseMs: options.leaseMs });
  result.claimed = rows.length;
  if (rows.length === 0) return result;

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
  if (oversize.length > 0) {
    result.failed += await markFailed(sql, oversize.map((r) => r.event_id), task.owner, `message_too_large: over ${options.maxMessageBytes} bytes`);
  }

  const outcomes = await publishWithin(publisher, messages, Math.floor(options.leaseMs / 2));
  const positions: PublishedPosition[] = [];
  const retry: ClaimedRow[] = [];
  const failed: ClaimedRow[] = [];
  let firstError: PostboxError | null = null;
  outcomes.forEach((outcome, i) => {
    const row = sendable[i]!;
    if (outcome.ok) {
      positions.push({ event_id: row.event_id, partition: outcome.confirmation.partition, offset: outcome.confirmation.offset });
      return;
    }
    firstError ??= outcome.error;
    if (outcome.error.kind === 'permanent' || row.attempts >= options.maxAttempts) failed.push(row);
    else retry.push(row);
  });

  result.published = await markPublished(sql, positions);
  if (failed.length > 0) {
    result.failed += await markFailed(sql, failed.map((r) => r.event_id), task.owner, describe(firstError!, failed[0]!.attempts));
  }
  if (retry.length > 0) {
    const attempt = Math.max(...retry.map((r) => r.attempts)) - 1;
    const delay = backoffDelayMs(attempt, options.backoff);
    result.rescheduled = await reschedule(sql, retry.map((r) => r.event_id), task.owner, delay, describe(firstError!, attempt + 1));
    result.pauseMs = delay;
  }
  if (firstError) {
    const e: PostboxError = firstError;
    result.error = { code: e.code, kind: e.kind, message: e.message };
  }
  return result;
}

/**
 * The lease must outlast the publish, so the publish gets half the lease. Past that the outcome is unknown (the
 * broker may still store the records): the rows are retried with the same ids, and consumers absorb a duplicate.
 */
async function publishWithin(publisher: Publisher, messages: OutboundMessage[], timeoutMs: number): Promise<PublishOutcome[]> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<PublishOutcome[]>((resolve) => {
    timer = setTimeout(() => {
      const error = new BrokerError('publish_timeout', 'unknown', `publish did not complete within ${timeoutMs} ms (half the lease)`);
      resolve(messages.map(() => ({ ok: false, error })));
    }, timeoutMs);
  });
  try {
    return await Promise.race([publisher.publish(messages), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function describe(error: PostboxError, attempts: number): string {
  return `${error.code} (${error.kind}, attempt ${attempts}): ${error.message}`.slice(0, 2000);
}
