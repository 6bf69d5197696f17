import type { InboundRecord } from '../ports/subscriber.ts';

/**
 * A batch as it crosses into a worker thread: plain data only. The values travel in one packed byte array and
 * the rest as one JSON string, so structured clone copies two flat things instead of an object per record
 * (piscina: structured clone of object graphs is the slow part of a thread hop).
 */
export interface ConsumeTask {
  /** JSON of WireMeta[] */
  meta: string;
  values: Uint8Array;
  /** Durable retries are on (a retry scheduler runs): a transient failure goes to the retry ledger. */
  durable?: boolean;
  /** The parent of the task's process spans (a due retry runs under its retry span); none: each starts a trace. */
  traceparent?: string;
}

/** [topic, partition, offset, key, headers, value length (-1 = null value), attempt, 1 = a due retry] */
type WireMeta = [string, number, string, string | null, Record<string, string>, number, number, number];

export interface WireRecord extends InboundRecord {
  /** 1 on first delivery, then 2, 3, … (in-memory retries and durable retries alike). */
  attempt: number;
  /** A due retry from the ledger (or a replay): the record may lift its own aggregate's block. */
  retry?: boolean;
}

export type Outcome = 'applied' | 'duplicate' | 'ignored' | 'parked' | 'failed' | 'transient' | 'scheduled';

export interface RecordResult {
  outcome: Outcome;
  /** Parked events applied after this one closed their gap. */
  drained: number;
  code?: string;
  detail?: string;
  /** outcome 'scheduled': the ledger row now holds the retry; the scheduler job is still to be enqueued. */
  retry?: { eventId: string; attempt: number; dueAt: number; traceparent?: string };
  /**
   * Parked successors this event's drain could not apply (a transient error): each now has its ledger row and
   * blocks the aggregate, committed with this event; their scheduler jobs are still to be enqueued.
   */
  successorRetries?: Array<{ eventId: string; attempt: number; dueAt: number }>;
}

export interface ConsumeTaskResult {
  results: RecordResult[];
}

export function encodeTask(records: WireRecord[], durable = false): ConsumeTask {
  let total = 0;
  for (const r of records) total += r.value?.length ?? 0;
  const values = new Uint8Array(total);
  const meta: WireMeta[] = [];
  let at = 0;
  for (const r of records) {
    if (r.value) {
      values.set(r.value, at);
      at += r.value.length;
    }
    meta.push([
      r.topic,
      r.partition,
      r.offset,
      r.key,
      r.headers,
      r.value ? r.value.length : -1,
      r.attempt,
      r.retry ? 1 : 0,
    ]);
  }
  return { meta: JSON.stringify(meta), values, durable };
}

export function decodeTask(task: ConsumeTask): WireRecord[] {
  const meta = JSON.parse(task.meta) as WireMeta[];
  const bytes = Buffer.from(task.values.buffer, task.values.byteOffset, task.values.byteLength);
  let at = 0;
  return meta.map(([topic, partition, offset, key, headers, length, attempt, retry]) => {
    const value = length < 0 ? null : bytes.subarray(at, at + length);
    if (length > 0) at += length;
    return { topic, partition, offset, key, headers, value, attempt, retry: retry === 1 };
  });
}
