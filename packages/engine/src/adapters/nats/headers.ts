import { headers as natsHeaders, type MsgHdrs } from '@nats-io/transport-node';
import { TRACE_HEADERS, type MessageHeaders } from '../../envelope/headers.ts';

// The CloudEvents NATS protocol binding, binary content mode: each attribute a `ce-`-prefixed header, the content
// type included (`ce-datacontenttype`: a plain Content-Type would announce structured mode); the W3C trace context
// as its own plain headers. NATS header names are case-sensitive on read in nats.js: always lowercase here.
// Attribute values are percent-encoded as in the CloudEvents HTTP binding (space, '"', '%' and everything outside
// printable ASCII): a NATS header value is one line of text, and the server trims its ends.
const PREFIX = 'ce-';

/**
 * The message key travels as the CloudEvents partitioning extension (`ce-partitionkey`): a NATS message has no key
 * of its own. The subscriber takes it out of the headers again, so it never reads as an event extension.
 */
export const KEY_HEADER = 'partitionkey';
const ESCAPED = /[^!#$&-~]/gu;

function encodeValue(value: string): string {
  return value.replace(ESCAPED, (c) =>
    [...Buffer.from(c, 'utf8')].map((b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`).join(''),
  );
}

function decodeValue(value: string): string {
  if (!value.includes('%')) return value;
  try {
    return decodeURIComponent(value);
  } catch {
    // Not ours (a malformed escape from another producer): as it came.
    return value;
  }
}

/** Broker-neutral headers (envelope/headers.ts) as NATS message headers. */
export function toNatsHeaders(headers: Readonly<MessageHeaders>): MsgHdrs {
  const out = natsHeaders();
  for (const [name, value] of Object.entries(headers)) {
    if (TRACE_HEADERS.has(name)) out.set(name, value);
    else out.set(PREFIX + name, encodeValue(value));
  }
  return out;
}

/**
 * NATS message headers as broker-neutral ones (the first value of a repeated header). Headers outside the
 * binding — JetStream's own `Nats-*`, anything neither `ce-` nor the trace context — are left out.
 */
export function fromNatsHeaders(headers: MsgHdrs | undefined): MessageHeaders {
  const out: Array<[string, string]> = [];
  for (const [name, values] of headers ?? []) {
    const value = values[0];
    if (value === undefined) continue;
    const lower = name.toLowerCase();
    if (lower.startsWith(PREFIX) && lower.length > PREFIX.length)
      out.push([lower.slice(PREFIX.length), decodeValue(value)]);
    else if (TRACE_HEADERS.has(lower)) out.push([lower, value]);
  }
  // fromEntries, not assignment: a `ce-__proto__` header can never set the object's prototype.
  return Object.fromEntries(out);
}
