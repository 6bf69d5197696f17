import type { InboundRecord } from '../ports/subscriber.ts';

/**
 * The field names every Postbox log line uses for an event, so that one query finds an event in any role's
 * logs: event_id, aggregate_id, aggregate_version, topic, partition, offset (the broker position), consumer (set
 * on the consumer's child logger), error_code (with err, a message that never quotes a payload).
 */
export interface EventLogFields {
  event_id?: string;
  aggregate_id?: string;
  aggregate_version?: number;
  topic?: string;
  partition?: number;
  offset?: string;
}

/** An inbound record's identity, from its CloudEvents headers (relay/record.ts); the value is never read. */
export function recordLogFields(
  record: Pick<InboundRecord, 'topic' | 'partition' | 'offset' | 'key' | 'headers'>,
): EventLogFields {
  const h = record.headers;
  const version = Number(h.aggregateversion);
  const aggregate = record.key ?? h.subject;
  return {
    ...(h.id ? { event_id: h.id } : {}),
    ...(aggregate ? { aggregate_id: aggregate } : {}),
    ...(Number.isSafeInteger(version) ? { aggregate_version: version } : {}),
    topic: record.topic,
    ...(record.partition >= 0 ? { partition: record.partition } : {}),
    ...(record.offset !== '-1' ? { offset: record.offset } : {}),
  };
}
