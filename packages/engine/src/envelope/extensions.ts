/**
 * CloudEvents extension attributes a producer adds to an event (a saga's `sagaid`, `replyto`, …). Each travels as
 * a message header of its own name (envelope/headers.ts; Kafka's binding makes it `ce_<name>`), is stored with
 * the outbox row, and reaches the
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
  // Trace context travels as the plain `traceparent`/`tracestate` headers; an extension copy would contradict them.
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

/** The header of each extension; reserved names are skipped (the relay's own attributes win). */
export function extensionHeaders(extensions: Readonly<Record<string, string>>): Record<string, string> {
  // fromEntries, not assignment: an extension named `__proto__` can never set the object's prototype.
  return Object.fromEntries(Object.entries(extensions).filter(([name]) => !RESERVED_ATTRIBUTES.has(name)));
}

/**
 * Every header of a record (broker-neutral, envelope/headers.ts) that is not an attribute Postbox knows: the
 * event's extensions; undefined when there is none. Names are taken as they come: validateEnvelope judges them.
 */
export function extensionsOf(headers: Readonly<Record<string, string>>): Record<string, string> | undefined {
  // A loop that allocates only when there is an extension: this runs for every event a consumer reads.
  let found: Record<string, string> | undefined;
  for (const name of Object.keys(headers)) {
    if (RESERVED_ATTRIBUTES.has(name)) continue;
    found ??= {};
    // An own property, as fromEntries would make it: an extension named `__proto__` never sets the prototype.
    Object.defineProperty(found, name, { value: headers[name], enumerable: true, writable: true, configurable: true });
  }
  return found;
}
