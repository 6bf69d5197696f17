import type { IHeaders } from 'kafkajs';
import { TRACE_HEADERS, type MessageHeaders } from '../../envelope/headers.ts';

// The CloudEvents Kafka protocol binding, binary content mode: each attribute a `ce_`-prefixed header, the data's
// content type as `content-type`; the W3C trace context as its own plain headers.
const PREFIX = 'ce_';
const CONTENT_TYPE = 'content-type';

// Both conversions run once per event on the relay's and the consumer's main thread: plain loops filling one
// object, no entries arrays (Object.entries/fromEntries would cost a few µs per event).

/** Broker-neutral headers (envelope/headers.ts) as Kafka record headers. */
export function toKafkaHeaders(headers: Readonly<MessageHeaders>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of Object.keys(headers)) {
    const value = headers[name]!;
    if (TRACE_HEADERS.has(name)) out[name] = value;
    else if (name === 'datacontenttype') out[CONTENT_TYPE] = value;
    else out[PREFIX + name] = value;
  }
  return out;
}

/**
 * Kafka record headers as broker-neutral ones (the first value of a repeated header). Headers outside the
 * binding — neither `ce_`, `content-type` nor the trace context — are not Postbox's and are left out.
 */
export function fromKafkaHeaders(headers: IHeaders | undefined): MessageHeaders {
  const out: MessageHeaders = {};
  if (headers === undefined) return out;
  for (const name of Object.keys(headers)) {
    const raw = headers[name];
    const first = Array.isArray(raw) ? raw[0] : raw;
    if (first === undefined) continue;
    const key = neutralName(name);
    if (key === null) continue;
    const value = typeof first === 'string' ? first : first.toString('utf8');
    // A `ce___proto__` header is an own property, never the object's prototype.
    if (key === '__proto__')
      Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
    else out[key] = value;
  }
  return out;
}

function neutralName(name: string): string | null {
  if (name.length > PREFIX.length && name.startsWith(PREFIX)) return name.slice(PREFIX.length);
  if (name === CONTENT_TYPE) return 'datacontenttype';
  return TRACE_HEADERS.has(name) ? name : null;
}
