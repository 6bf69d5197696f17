import { extensionHeaders } from '../envelope/extensions.ts';
import type { ClaimedRow } from '../queries/outbox-claim.ts';
import type { OutboundMessage } from '../ports/publisher.ts';

/**
 * An outbox row as a broker message, CloudEvents in binary content mode: the data is the message's value, byte
 * for byte as stored; the attributes are headers by their own names (envelope/headers.ts), which each broker
 * adapter maps to its protocol binding; the key is the aggregate id, so one aggregate stays in one partition.
 * Any CloudEvents consumer can read Postbox events. The event's own extension attributes follow; none can
 * replace an attribute set here.
 */
export function toRecord(row: ClaimedRow): OutboundMessage {
  const headers: Record<string, string> = {
    specversion: '1.0',
    id: row.event_id,
    type: row.event_type,
    source: row.producer,
    subject: row.aggregate_id,
    time: row.occurred_at.toISOString(),
    // CloudEvents extension attribute names: lowercase letters and digits only.
    aggregateversion: row.aggregate_version,
    schemaversion: String(row.schema_version),
    datacontenttype: 'application/json',
  };
  if (row.traceparent) headers.traceparent = row.traceparent;
  if (row.tracestate) headers.tracestate = row.tracestate;
  if (row.deadline) headers.deadline = row.deadline.toISOString();
  if (row.extensions) Object.assign(headers, extensionHeaders(row.extensions));
  return { topic: row.topic, key: row.aggregate_id, value: row.payload, headers };
}

/**
 * Bytes a record occupies on the wire, near enough to check against the broker's message size limit; each
 * header counts room for its binding's prefix (`ce_`, `cloudEvents_`).
 */
export function recordBytes(message: OutboundMessage): number {
  let size = message.value.length + Buffer.byteLength(message.key) + 64;
  for (const [k, v] of Object.entries(message.headers)) size += k.length + Buffer.byteLength(v) + 14;
  return size;
}
