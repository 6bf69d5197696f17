import { z } from 'zod';
import { EnvelopeTooLargeError, EnvelopeValidationError, type EnvelopeIssue } from '../errors.ts';
import { keepsEnvelopeRules, NAME, NO_CONTROL, TRACEPARENT, UUID_V7 } from './envelope-rules.ts';
import { EXTENSION_NAME, MAX_EXTENSION_VALUE_BYTES, MAX_EXTENSIONS, RESERVED_ATTRIBUTES } from './extensions.ts';

/**
 * The event envelope: the identity, ordering and provenance of one event, plus its data. Field names are the
 * wire names (they travel as CloudEvents attributes, see relay/record.ts) so that logs, SQL and the topic agree.
 */
export interface Envelope {
  /** UUIDv7, born with the command and kept across relay retry, redelivery and replay. */
  event_id: string;
  event_type: string;
  schema_version: number;
  aggregate_id: string;
  /** 1, 2, 3, … per aggregate; the consumer's version gate orders by it. */
  aggregate_version: number;
  /** ISO-8601 with offset. */
  occurred_at: string;
  /** Who produced it (CloudEvents `source`). */
  producer: string;
  traceparent?: string | undefined;
  tracestate?: string | undefined;
  /** ISO-8601: past it the event is moot — a transient failure then ends as `expired`, not retried. */
  deadline?: string | undefined;
  /**
   * CloudEvents extension attributes, each sent as a header of its name (see envelope/extensions.ts): names of 1–20
   * lowercase letters or digits, none that Postbox sets itself; values up to 1 KiB; at most 20.
   */
  extensions?: Record<string, string> | undefined;
  data: unknown;
}

/** 1 MiB: below Kafka's default message.max.bytes once headers are added. */
export const DEFAULT_MAX_ENVELOPE_BYTES = 1024 * 1024;

const name = (max: number) =>
  z
    .string({ error: 'must be a string' })
    .min(1, { error: 'must not be empty' })
    .max(max, { error: `must be at most ${max} characters` })
    .regex(NAME, { error: 'must start with a letter and use only letters, digits and . _ : / -' });

const extensionName = z
  .string()
  .regex(EXTENSION_NAME, { error: 'must be 1–20 lowercase letters or digits (a CloudEvents attribute name)' })
  .refine((n) => !RESERVED_ATTRIBUTES.has(n), {
    error: (issue) => `is reserved: Postbox sets the ${String(issue.input)} attribute itself`,
  });

const extensionValue = z
  .string({ error: 'must be a string' })
  .regex(NO_CONTROL, { error: 'must not contain control characters' })
  .refine((v) => Buffer.byteLength(v, 'utf8') <= MAX_EXTENSION_VALUE_BYTES, {
    error: `must be at most ${MAX_EXTENSION_VALUE_BYTES} bytes (UTF-8)`,
  });

const extensions = z
  .record(extensionName, extensionValue, { error: 'must be an object of string values' })
  .refine((r) => Object.keys(r).length <= MAX_EXTENSIONS, {
    error: `must have at most ${MAX_EXTENSIONS} attributes`,
    // Also when some entry failed, so every problem is reported at once; not when it is no object at all.
    when: (payload) => typeof payload.value === 'object' && payload.value !== null,
  });

const isoDatetime = z.iso.datetime({ offset: true, error: 'must be an ISO-8601 timestamp with offset' });

/** zod's own pattern for an ISO-8601 timestamp with offset: the fast check (envelope-rules.ts) uses it too. */
export const ENVELOPE_DATETIME: RegExp = isoDatetime._zod.def.pattern!;

const envelopeSchema = z.object({
  event_id: z.string({ error: 'must be a string' }).regex(UUID_V7, { error: 'must be a lowercase UUIDv7' }),
  event_type: name(200),
  schema_version: z
    .number({ error: 'must be a number' })
    .int({ error: 'must be an integer' })
    .min(1, { error: 'must be at least 1' })
    .max(32767, { error: 'must be at most 32767' }),
  aggregate_id: z
    .string({ error: 'must be a string' })
    .min(1, { error: 'must not be empty' })
    .max(200, { error: 'must be at most 200 characters' })
    .regex(NO_CONTROL, { error: 'must not contain control characters' }),
  aggregate_version: z
    .number({ error: 'must be a number' })
    .int({ error: 'must be an integer' })
    .min(1, { error: 'must be at least 1' })
    .max(Number.MAX_SAFE_INTEGER, { error: 'must be a safe integer' }),
  occurred_at: isoDatetime,
  producer: name(200),
  traceparent: z
    .string({ error: 'must be a string' })
    .regex(TRACEPARENT, { error: 'must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)' })
    .optional(),
  tracestate: z
    .string({ error: 'must be a string' })
    .max(512, { error: 'must be at most 512 characters' })
    .regex(NO_CONTROL, { error: 'must not contain control characters' })
    .optional(),
  deadline: isoDatetime.optional(),
  extensions: extensions.optional(),
  data: z.unknown().refine((v) => v !== undefined, { error: 'is required' }),
});

/** zod's verdict alone (the property test holds the fast check to it). */
export function envelopeSchemaAccepts(candidate: unknown): boolean {
  return strictEnvelope.safeParse(candidate).success;
}

function ruleOf(issue: z.core.$ZodIssue): string {
  if (issue.code === 'unrecognized_keys') return `unknown field(s): ${issue.keys.join(', ')}`;
  // A record key that failed: its own rules, not zod's generic "Invalid key in record".
  if (issue.code === 'invalid_key') return issue.issues.map((i) => i.message).join('; ');
  return issue.message;
}

function issuesOf(error: z.ZodError): EnvelopeIssue[] {
  return error.issues.map((issue) => ({ path: issue.path.map(String).join('.'), rule: ruleOf(issue) }));
}

// Built once: `.strict()` makes a new schema, and zod 4 compiles a new parser for it on first use, which would
// cost ≈ 170–190 µs per call if it ran per event (bench: enqueue and the consumer's parse both pay it).
const strictEnvelope = envelopeSchema.strict();

/**
 * Checks every field; throws EnvelopeValidationError naming each failing field and its rule. An envelope that
 * keeps every rule is returned as it is (the fast check, envelope-rules.ts); only one that breaks a rule is
 * parsed by zod, for its issues.
 */
export function validateEnvelope(candidate: unknown): Envelope {
  if (keepsEnvelopeRules(candidate, ENVELOPE_DATETIME)) return candidate as Envelope;
  const result = strictEnvelope.safeParse(candidate);
  if (!result.success) throw new EnvelopeValidationError(issuesOf(result.error), { cause: result.error });
  return result.data as Envelope;
}

/**
 * Serializes `data` once; the bytes are what the outbox stores and the relay sends unchanged.
 * Throws EnvelopeValidationError if data is not JSON-serializable, EnvelopeTooLargeError over the limit
 * (the limit counts data plus the envelope attributes and extensions, which travel as headers).
 */
export function encodeData(envelope: Envelope, maxBytes: number = DEFAULT_MAX_ENVELOPE_BYTES): Buffer {
  let text: string | undefined;
  try {
    text = JSON.stringify(envelope.data);
  } catch (cause) {
    throw new EnvelopeValidationError([{ path: 'data', rule: 'must be JSON-serializable' }], { cause });
  }
  if (text === undefined) throw new EnvelopeValidationError([{ path: 'data', rule: 'must be a JSON value' }]);
  const bytes = Buffer.from(text, 'utf8');
  const total = bytes.length + attributeBytes(envelope);
  if (total > maxBytes) throw new EnvelopeTooLargeError(total, maxBytes);
  return bytes;
}

function attributeBytes(e: Envelope): number {
  return (
    Buffer.byteLength(e.event_type) +
    Buffer.byteLength(e.aggregate_id) +
    Buffer.byteLength(e.producer) +
    Buffer.byteLength(e.tracestate ?? '') +
    extensionBytes(e.extensions) +
    128 // event_id, versions, time, traceparent and header names
  );
}

function extensionBytes(extensions: Record<string, string> | undefined): number {
  let bytes = 0;
  for (const [name, value] of Object.entries(extensions ?? {})) bytes += 3 + name.length + Buffer.byteLength(value);
  return bytes;
}
