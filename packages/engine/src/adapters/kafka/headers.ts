import type { IHeaders } from 'kafkajs';
import { TRACE_HEADERS, type MessageHeaders } from '../../envelope/headers.ts';

// The CloudEvents Kafka protocol binding, binary content mode: each attribute a `ce_`-prefixed header, the data's
// content type as `content-type`; the W3C trace context as its own plain headers.
const PREFIX = 'ce_';
const CONTENT_TYPE = 'content-type';

/** Broker-neutral headers (envelope/headers.ts) as Kafka record headers. */
export function toKafkaHeaders(headers: Readonly<MessageHeaders>): Record<string, string> {
  const out: Array<[string, string]> = [];
  for (const [name, value] of Object.entries(headers)) {
    if (TRACE_HEADERS.has(name)) out.push([name, value]);
    else if (name === 'datacontenttype') out.push([CONTENT_TYPE, value]);
    else out.push([PREFIX + name, value]);
  }
  return Object.fromEntries(out);
}

/**
 * Kafka record headers as broker-neutral ones (the first value of a repeated header). Headers outside the
 * binding — neither `ce_`, `content-type` nor the trace context — are not Postbox's and are left out.
 */
export function fromKafkaHeaders(headers: IHeaders | undefined): MessageHeaders {
  const out: Array<[string, string]> = [];
  for (const [name, raw] of Object.entries(headers ?? {})) {
    if (raw === undefined) continue;
    const first = Array.isArray(raw) ? raw[0] : raw;
    if (first === undefined) continue;
    const value = first.toString();
    if (name.startsWith(PREFIX) && name.length > PREFIX.length) out.push([name.slice(PREFIX.length), value]);
    else if (name === CONTENT_TYPE) out.push(['datacontenttype', value]);
    else if (TRACE_HEADERS.has(name)) out.push([name, value]);
  }
  // fromEntries, not assignment: a `ce___proto__` header can never set the object's prototype.
  return Object.fromEntries(out);
}
