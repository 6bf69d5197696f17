import type { StoredRecord } from '../records/stored-record.ts';
import type { PayloadKeyRing } from './payload-keys.ts';
import { seal, unseal, type Sealed } from './sealed.ts';

/**
 * What of a row is sealed, and what the seal is bound to. A failure row seals its payload, headers and envelope
 * together; a retry ledger row seals its stored record. The additional data names the row by what never changes
 * on it, so rotation re-seals under the same binding.
 */

/** The event data a failure row keeps: sealed together when a key ring is set. */
export interface FailureContent {
  payload: Buffer | null;
  headers: Record<string, string> | null;
  envelope: unknown;
}

/** The immutable coordinates of a failure row. */
export interface FailureIdentity {
  consumer_name: string;
  event_id: string | null;
  topic: string | null;
  broker_partition: number | null;
  broker_offset: string | null;
}

/** The sealed columns as stored (both null for a clear row). */
export interface SealedColumns {
  key_id: string | null;
  sealed: Buffer | null;
}

function failureAad(f: FailureIdentity): string {
  return `message_failure/${f.consumer_name}/${f.event_id?.toLowerCase() ?? '-'}/${f.topic ?? '-'}/${f.broker_partition ?? '-'}/${f.broker_offset ?? '-'}`;
}

function failureName(f: FailureIdentity): string {
  return `the failure of consumer "${f.consumer_name}" at ${f.topic ?? '?'}/${f.broker_partition ?? '?'}@${f.broker_offset ?? '?'}`;
}

export function sealFailure(ring: PayloadKeyRing, f: FailureIdentity, content: FailureContent): Sealed {
  const plain = JSON.stringify({
    payload: content.payload ? content.payload.toString('base64') : null,
    headers: content.headers,
    envelope: content.envelope ?? null,
  });
  return seal(ring, Buffer.from(plain, 'utf8'), failureAad(f));
}

/** A failure row's content: as stored when clear, opened with its key when sealed. */
export function openFailure(
  ring: PayloadKeyRing | null,
  row: FailureIdentity & SealedColumns & FailureContent,
): FailureContent {
  if (row.sealed === null || row.key_id === null)
    return { payload: row.payload, headers: row.headers, envelope: row.envelope };
  const plain = unseal(ring, { keyId: row.key_id, bytes: row.sealed }, failureAad(row), failureName(row));
  const parsed = JSON.parse(plain.toString('utf8')) as {
    payload: string | null;
    headers: FailureContent['headers'];
    envelope: unknown;
  };
  return {
    payload: parsed.payload === null ? null : Buffer.from(parsed.payload, 'base64'),
    headers: parsed.headers,
    envelope: parsed.envelope,
  };
}

function ledgerAad(consumer: string, eventId: string): string {
  return `message_retry/${consumer}/${eventId.toLowerCase()}`;
}

export function sealRecord(ring: PayloadKeyRing, consumer: string, eventId: string, record: StoredRecord): Sealed {
  return seal(ring, Buffer.from(JSON.stringify(record), 'utf8'), ledgerAad(consumer, eventId));
}

/** A ledger row's stored record: as stored when clear, opened with its key when sealed. */
export function openRecord(
  ring: PayloadKeyRing | null,
  row: SealedColumns & { consumer_name: string; event_id: string; record: unknown },
): StoredRecord {
  if (row.sealed === null || row.key_id === null) return row.record as StoredRecord;
  const what = `the retry of event ${row.event_id} for consumer "${row.consumer_name}"`;
  const plain = unseal(
    ring,
    { keyId: row.key_id, bytes: row.sealed },
    ledgerAad(row.consumer_name, row.event_id),
    what,
  );
  return JSON.parse(plain.toString('utf8')) as StoredRecord;
}
