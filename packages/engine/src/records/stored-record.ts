import { neutralHeaders } from '../envelope/headers.ts';
import type { InboundRecord } from '../ports/subscriber.ts';

/**
 * A broker record as Postbox keeps it in PostgreSQL (JSON, value in base64): a parked event, a retry ledger row
 * and a replay all keep the record as it was received, so the event that runs later has the very same bytes —
 * the same event id, the same payload. Headers are broker-neutral (envelope/headers.ts).
 */
export interface StoredRecord {
  topic: string;
  partition: number;
  offset: string;
  key: string | null;
  /** base64 of the value bytes, or null for a null value */
  value: string | null;
  headers: Record<string, string>;
}

type RecordFields = Pick<InboundRecord, 'topic' | 'partition' | 'offset' | 'key' | 'headers' | 'value'>;

export function storeRecord(r: RecordFields): StoredRecord {
  return {
    topic: r.topic,
    partition: r.partition,
    offset: r.offset,
    key: r.key,
    value: r.value ? Buffer.from(r.value).toString('base64') : null,
    headers: r.headers,
  };
}

export function loadRecord(r: StoredRecord): InboundRecord {
  return {
    topic: r.topic,
    partition: r.partition,
    offset: r.offset,
    key: r.key,
    value: r.value === null ? null : Buffer.from(r.value, 'base64'),
    // Records stored before headers were broker-neutral carry the Kafka binding's names.
    headers: neutralHeaders(r.headers),
  };
}
