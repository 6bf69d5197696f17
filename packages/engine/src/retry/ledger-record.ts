import type { InboundRecord } from '../ports/subscriber.ts';

/**
 * A broker record as the retry ledger keeps it (JSON, value in base64), so a due retry replays the very bytes
 * that were received — the same event id, the same payload.
 */
export interface LedgerRecord {
  topic: string;
  partition: number;
  offset: string;
  key: string | null;
  headers: Record<string, string>;
  value: string | null;
}

export function toLedgerRecord(r: Pick<InboundRecord, 'topic' | 'partition' | 'offset' | 'key' | 'headers' | 'value'>): LedgerRecord {
  return { topic: r.topic, partition: r.partition, offset: r.offset, key: r.key, headers: r.headers, value: r.value ? Buffer.from(r.value).toString('base64') : null };
}

export function fromLedgerRecord(r: LedgerRecord): Pick<InboundRecord, 'topic' | 'partition' | 'offset' | 'key' | 'headers' | 'value'> {
  return { topic: r.topic, partition: r.partition, offset: r.offset, key: r.key, headers: r.headers, value: r.value === null ? null : Buffer.from(r.value, 'base64') };
}
