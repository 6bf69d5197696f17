import type { Field } from '@cloudamqp/amqp-client';
import { TRACE_HEADERS, type MessageHeaders } from '../../envelope/headers.ts';

// The CloudEvents AMQP protocol binding, binary content mode: each attribute an application property named
// `cloudEvents_<attribute>` (the binding allows `cloudEvents:` or `cloudEvents_`; `_` is the one AMQP 0-9-1
// brokers and clients take everywhere), which RabbitMQ carries in the 0-9-1 headers table; the content type as
// the message's own content-type property; the W3C trace context as plain headers.
const PREFIX = 'cloudEvents_';

/**
 * The message key travels as the CloudEvents partitioning extension (`cloudEvents_partitionkey`): an AMQP message
 * has no key of its own. A subscriber takes it out of the headers again, so it never reads as an event extension.
 */
export const KEY_HEADER = 'partitionkey';

/** Broker-neutral headers (envelope/headers.ts) as an AMQP 0-9-1 headers table and content type. */
export function toAmqpHeaders(headers: Readonly<MessageHeaders>): {
  headers: Record<string, Field>;
  contentType?: string;
} {
  const out: Record<string, Field> = {};
  let contentType: string | undefined;
  for (const [name, value] of Object.entries(headers)) {
    if (name === 'datacontenttype') contentType = value;
    else if (TRACE_HEADERS.has(name)) out[name] = value;
    else out[PREFIX + name] = value;
  }
  return contentType === undefined ? { headers: out } : { headers: out, contentType };
}

/**
 * An AMQP headers table (and content type) as broker-neutral headers. Headers outside the binding — RabbitMQ's own
 * `x-*`, anything neither `cloudEvents_` nor the trace context — are left out; values that are not strings (a
 * number another producer set) are read as their text.
 */
export function fromAmqpHeaders(
  headers: Record<string, Field> | undefined,
  contentType: string | undefined,
): MessageHeaders {
  const out: Array<[string, string]> = [];
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (value === undefined || value === null) continue;
    const text = typeof value === 'string' ? value : String(value);
    if (name.startsWith(PREFIX) && name.length > PREFIX.length) out.push([name.slice(PREFIX.length), text]);
    else if (TRACE_HEADERS.has(name)) out.push([name, text]);
  }
  if (contentType !== undefined) out.push(['datacontenttype', contentType]);
  // fromEntries, not assignment: a `cloudEvents___proto__` header can never set the object's prototype.
  return Object.fromEntries(out);
}
