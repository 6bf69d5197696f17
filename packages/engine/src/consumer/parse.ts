import { validateEnvelope, type Envelope } from '../envelope/envelope.ts';
import { extensionsOf } from '../envelope/extensions.ts';
import { EnvelopeValidationError } from '../errors.ts';
import type { InboundRecord } from '../ports/subscriber.ts';
import { sanitizeTraceFields } from '../telemetry/trace-context.ts';
import { acceptsSchema, tenantRefusal, type ConsumerDefinition } from './definition.ts';

/** Why a record can never be applied as it is. Each code is stored in message_failure.error_code. */
export type PoisonCode =
  | 'event_too_large'
  | 'not_utf8'
  | 'not_json'
  | 'envelope_invalid'
  | 'key_mismatch'
  | 'unknown_schema_version'
  | 'tenant_refused';

export type ParsedRecord =
  | { ok: true; envelope: Envelope }
  | {
      ok: false;
      code: PoisonCode;
      detail: string;
      envelope?: Envelope;
      /** What could be read of its identity, for the failure row and the block. */
      eventId: string | null;
      eventType: string | null;
      aggregateId: string | null;
      aggregateVersion: number | null;
    };

// V8's JSON.parse messages quote the text around the error (`"secret…" is not valid JSON`): only the position
// may leave, the value stays in the failure store's payload column.
const JSON_POSITION = /at position (\d+)/;

function jsonErrorPosition(cause: unknown): string {
  const m = JSON_POSITION.exec(String((cause as Error)?.message ?? ''));
  return m ? ` (syntax error at position ${m[1]})` : ' (syntax error)';
}

function traceFields(traceparent: string | undefined, tracestate: string | undefined) {
  const { dropped: _dropped, ...fields } = sanitizeTraceFields(traceparent, tracestate);
  return fields;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Reads a CloudEvents binary-mode record (see relay/record.ts; its headers broker-neutral, envelope/headers.ts)
 * into a validated envelope, or says exactly why not. Checks in order: size, UTF-8, JSON, envelope contract,
 * key = aggregate id, accepted schema version, accepted tenant. Every header that is not an attribute Postbox knows (nor the
 * trace context) is an extension: it reaches the handler in
 * `envelope.extensions` and is held to the same rules as at enqueue (one that breaks them is `envelope_invalid`).
 */
export function parseRecord(
  record: InboundRecord,
  definition: Pick<ConsumerDefinition, 'schemaVersions' | 'limits' | 'tenants'>,
): ParsedRecord {
  const h = record.headers;
  const poison = (code: PoisonCode, detail: string, envelope?: Envelope): ParsedRecord => {
    const version = Number(envelope?.aggregate_version ?? h.aggregateversion);
    return {
      ok: false,
      code,
      detail,
      ...(envelope ? { envelope } : {}),
      eventId: envelope?.event_id ?? (h.id && UUID.test(h.id) ? h.id.toLowerCase() : null),
      eventType: envelope?.event_type ?? h.type ?? null,
      aggregateId: envelope?.aggregate_id ?? h.subject ?? record.key,
      aggregateVersion: Number.isSafeInteger(version) && version >= 1 ? version : null,
    };
  };
  const value = record.value;
  const size = value?.length ?? 0;
  if (size > definition.limits.maxEventBytes)
    return poison('event_too_large', `value is ${size} bytes, over maxEventBytes ${definition.limits.maxEventBytes}`);
  if (!value || size === 0) return poison('not_json', 'the record has no value');
  let text: string;
  try {
    text = utf8.decode(value);
  } catch {
    return poison('not_utf8', 'the value is not valid UTF-8');
  }
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (cause) {
    return poison('not_json', `the value is not JSON${jsonErrorPosition(cause)}`);
  }
  const extensions = extensionsOf(h);
  let envelope: Envelope;
  try {
    envelope = validateEnvelope({
      event_id: h.id,
      event_type: h.type,
      schema_version: h.schemaversion === undefined ? undefined : Number(h.schemaversion),
      aggregate_id: h.subject,
      aggregate_version: h.aggregateversion === undefined ? undefined : Number(h.aggregateversion),
      occurred_at: h.time,
      producer: h.source,
      // Trace context never makes an event poison: a malformed one is left out, as at enqueue.
      ...traceFields(h.traceparent, h.tracestate),
      ...(h.deadline === undefined ? {} : { deadline: h.deadline }),
      ...(extensions === undefined ? {} : { extensions }),
      data,
    });
  } catch (cause) {
    if (cause instanceof EnvelopeValidationError) return poison('envelope_invalid', cause.message);
    throw cause;
  }
  if (record.key !== envelope.aggregate_id) {
    return poison(
      'key_mismatch',
      `record key ${JSON.stringify(record.key)} is not the aggregate id ${JSON.stringify(envelope.aggregate_id)}`,
      envelope,
    );
  }
  if (!acceptsSchema(definition, envelope.event_type, envelope.schema_version)) {
    const accepted = definition.schemaVersions[envelope.event_type] ?? [1];
    return poison(
      'unknown_schema_version',
      `${envelope.event_type} schema_version ${envelope.schema_version} is not accepted (accepted: ${accepted.join(', ')})`,
      envelope,
    );
  }
  const refused = tenantRefusal(definition, envelope.extensions?.tenant);
  if (refused) return poison('tenant_refused', refused, envelope);
  return { ok: true, envelope };
}
