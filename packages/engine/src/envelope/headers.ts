/**
 * The headers of a Postbox message, whatever the broker: the CloudEvents context attributes by their own names
 * (`id`, `type`, `source`, `subject`, `time`, `specversion`, `datacontenttype`, Postbox's `aggregateversion`,
 * `schemaversion`, `deadline`, `replaces`, and the event's extensions) and the W3C trace context (`traceparent`,
 * `tracestate`). Each broker adapter maps them to its protocol binding and back (Kafka: `ce_<name>` and
 * `content-type`); nothing outside the adapters knows a binding's header names. A CloudEvents attribute name is
 * lowercase letters and digits, so no neutral name ever contains `_` or `-`.
 */
export type MessageHeaders = Record<string, string>;

/** The W3C trace context: plain headers in every binding, never a prefixed attribute. */
export const TRACE_HEADERS: ReadonlySet<string> = new Set(['traceparent', 'tracestate']);

const LEGACY_PREFIX = 'ce_';

/**
 * Headers kept before they were broker-neutral (parked events, retry ledger rows and failures stored with the
 * Kafka binding's names: `ce_id`, `content-type`) read as the Kafka adapter reads a record today: prefixes off,
 * other headers than the trace context left out. Neutral headers come back unchanged. Telling them apart is
 * safe because a neutral name never contains `_` or `-`.
 */
export function neutralHeaders(stored: Readonly<Record<string, string>>): MessageHeaders {
  const entries = Object.entries(stored);
  if (!entries.some(([name]) => name.startsWith(LEGACY_PREFIX) || name === 'content-type')) return { ...stored };
  const neutral: Array<[string, string]> = [];
  for (const [name, value] of entries) {
    if (name.startsWith(LEGACY_PREFIX) && name.length > LEGACY_PREFIX.length)
      neutral.push([name.slice(LEGACY_PREFIX.length), value]);
    else if (name === 'content-type') neutral.push(['datacontenttype', value]);
    else if (TRACE_HEADERS.has(name)) neutral.push([name, value]);
  }
  // fromEntries, not assignment: a `ce___proto__` header can never set the object's prototype.
  return Object.fromEntries(neutral);
}
