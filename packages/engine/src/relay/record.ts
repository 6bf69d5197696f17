import { extensionHeaders } from '../envelope/extensions.ts';
import type { ClaimedRow } from '../queries/outbox-claim.ts';
import type { OutboundMessage } from '../ports/publisher.ts';

/**
 * An outbox row as a broker record in the CloudEvents Kafka protocol binding, binary content mode: the data is
 * the record value, byte for byte as stored; the attributes are `ce_`-prefixed headers; the key is the
 * aggregate id, so one aggregate stays in one partition. Any CloudEvents consumer can read Postbox events.
 * The event's own extension attributes follow as `ce_<name>`; none can replace an attribute set here.
 */
export function toRecord(row: ClaimedRow): OutboundMessage {
  const headers: Record<string, string> = {
    ce_specversion: '1.0',
    ce_id: row.event_id,
    ce_type: row.event_type,
    ce_source: row.producer,
    ce_subject: row.aggregate_id,
    ce_time: row.occurred_at.toISOString(),
    // CloudEvents extension attribute names: lowercase letters and digits only.
    ce_aggregateversion: row.aggregate_version,
    ce_schemaversion: String(row.schema_version),
    'content-type': 'application/json',
  };
  if (row.traceparent) headers.traceparent = row.traceparent;
  if (row.tracestate) headers.tracestate = row.tracestate;
  if (row.deadline) headers.ce_deadline = row.deadline.toISOString();
  if (row.extensions) Object.assign(headers, extensionHeaders(row.extensions));
  return { topic: row.topic, key: row.aggregate_id, value: row.payload, headers };
}

/** Bytes a record occupies on the wire, near enough to check against the broker's message size limit. */
export function recordBytes(message: OutboundMessage): number {
  let size = message.value.length + Buffer.byteLength(message.key) + 64;
  for (const [k, v] of Object.entries(message.headers)) size += k.length + Buffer.byteLength(v) + 2;
  return size;
}
