/**
 * CloudEvents extension attributes a producer adds to an event (a saga's `sagaid`, `replyto`, …). Each travels as
 * a `ce_<name>` header (Kafka protocol binding, binary mode), is stored with the outbox row, and reaches the
 * handler as `envelope.extensions`. The names below are the attributes Postbox itself writes or reads: an
 * extension may never take one, so a producer can neither forge nor shadow what the relay and consumer rely on.
 */
export const RESERVED_ATTRIBUTES: ReadonlySet<string> = new Set([
  // CloudEvents core context attributes (and `data`, reserved by the spec's formats).
  'specversion',
  'id',
  'type',
  'source',
  'subject',
  'time',
  'datacontenttype',
  'dataschema',
  'data',
  // Postbox's own extensions (relay/record.ts, consumer/parse.ts, failures/replay.ts).
  'aggregateversion',
  'schemaversion',
  'deadline',
  'replaces',
  // Trace context travels as the plain `traceparent`/`tracestate` headers; a `ce_` copy would contradict them.
  'traceparent',
  'tracestate',
  // The Kafka binding maps `partitionkey` to the record key, which Postbox sets to the aggregate id.
  'partitionkey',
]);

/** CloudEvents attribute names: lowercase letters and digits, at most 20 of them. */
export const EXTENSION_NAME = /^[a-z0-9]{1,20}$/;
export const MAX_EXTENSIONS = 20;
/** UTF-8 bytes of one value. */
export const MAX_EXTENSION_VALUE_BYTES = 1024;

const PREFIX = 'ce_';

/** The `ce_<name>` header of each extension; reserved names are skipped (the relay's own attributes win). */
export function extensionHeaders(extensions: Readonly<Record<string, string>>): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(extensions)) {
    if (!RESERVED_ATTRIBUTES.has(name)) headers[PREFIX + name] = value;
  }
  return headers;
}

/**
 * Every `ce_` header of a record that is not an attribute Postbox knows, by name without the prefix; undefined
 * when there is none. Names are taken as they come: validateEnvelope judges them.
 */
export function extensionsOf(headers: Readonly<Record<string, string>>): Record<string, string> | undefined {
  const found: Array<[string, string]> = [];
  for (const [header, value] of Object.entries(headers)) {
    if (!header.startsWith(PREFIX)) continue;
    const name = header.slice(PREFIX.length);
    if (!RESERVED_ATTRIBUTES.has(name)) found.push([name, value]);
  }
  // fromEntries, not assignment: a `ce___proto__` header can never set the object's prototype.
  return found.length === 0 ? undefined : Object.fromEntries(found);
}
