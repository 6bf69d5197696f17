import type { Queryable } from '../db/connect.ts';
import { sqlExecutor } from '../db/sql-executor.ts';
import { encodeData, validateEnvelope, DEFAULT_MAX_ENVELOPE_BYTES, type Envelope } from '../envelope/envelope.ts';
import { newEventId } from '../envelope/event-id.ts';
import { EnvelopeValidationError } from '../errors.ts';
import type { SqlExecutor } from '../ports/sql-executor.ts';
import { insertOutboxRows, type OutboxInsertRow } from '../queries/outbox-insert.ts';
import { recordTraceContextDropped } from '../telemetry/metrics.ts';
import { sanitizeTraceFields } from '../telemetry/trace-context.ts';
import { createEventContext } from '../telemetry/tracing.ts';
import { markDirty } from './dirty.ts';

/** What a service supplies; Postbox fills in identity and time when they are not given. */
export interface EventInput {
  event_type: string;
  aggregate_id: string;
  aggregate_version: number;
  data: unknown;
  /** @defaultValue 1 */
  schema_version?: number;
  /** @defaultValue a new UUIDv7. Pass it when the command already has one (retries keep the same id). */
  event_id?: string;
  /** @defaultValue now */
  occurred_at?: string;
  /** @defaultValue options.producer */
  producer?: string;
  /**
   * The event's creation context (W3C). @defaultValue the context of a `create {topic}` span started here, a
   * child of the active span. A malformed value is ignored (and counted), never a reason to fail the write.
   */
  traceparent?: string;
  tracestate?: string;
  /** ISO-8601 with offset: past it, the event is not retried any more (it ends `expired`). */
  deadline?: string;
  /**
   * CloudEvents extension attributes (`{ sagaid: '…' }`), sent as headers of their names (Kafka: `ce_<name>`) and seen by the handler as
   * `envelope.extensions`. Names: 1–20 lowercase letters or digits, not one Postbox sets; values up to 1 KiB;
   * at most 20. @defaultValue none
   */
  extensions?: Record<string, string>;
  /**
   * The tenant the event belongs to: the `tenant` extension attribute (header `ce_tenant` on Kafka), which a
   * consumer naming its `tenants` checks. Same as `extensions: { tenant }`. @defaultValue none
   */
  tenant?: string;
  /** Set by replay of an edited payload: the event this one replaces. */
  replaces_event_id?: string;
}

export interface EnqueueOptions {
  topic: string;
  /** @defaultValue 'postbox' */
  producer?: string;
  /** @defaultValue 1 MiB */
  maxEnvelopeBytes?: number;
}

/**
 * Writes events to the outbox inside the caller's transaction, validated and serialized once. Either every
 * event is written or the call throws before writing any: the caller's transaction is never half-written by it.
 * `tx` is a postgres.js transaction, or any client's transaction through its adapter (@postbox/engine/pg,
 * /drizzle, /kysely, /prisma, /typeorm); a handle outside a transaction is refused (NotInTransactionError).
 */
export async function enqueueMany(
  tx: Queryable | SqlExecutor,
  events: EventInput[],
  options: EnqueueOptions,
): Promise<Envelope[]> {
  const executor = sqlExecutor(tx);
  const envelopes: Envelope[] = [];
  const rows: OutboxInsertRow[] = [];
  for (const input of events) {
    const supplied = sanitizeTraceFields(input.traceparent, input.tracestate);
    if (supplied.dropped) recordTraceContextDropped(options.topic);
    const envelope = validateEnvelope({
      event_id: input.event_id ?? newEventId(),
      event_type: input.event_type,
      schema_version: input.schema_version ?? 1,
      aggregate_id: input.aggregate_id,
      aggregate_version: input.aggregate_version,
      occurred_at: input.occurred_at ?? new Date().toISOString(),
      producer: input.producer ?? options.producer ?? 'postbox',
      ...(input.deadline === undefined ? {} : { deadline: input.deadline }),
      ...withTenant(input),
      data: input.data,
    });
    // None is none: an empty object is stored as NULL and read back as no extensions, as the consumer sees it.
    if (envelope.extensions && Object.keys(envelope.extensions).length === 0) delete envelope.extensions;
    // After validation, so an event that is never written starts no span.
    const trace = supplied.traceparent ? supplied : createEventContext(options.topic, envelope);
    if (trace.traceparent) envelope.traceparent = trace.traceparent;
    if (trace.tracestate) envelope.tracestate = trace.tracestate;
    const payload = encodeData(envelope, options.maxEnvelopeBytes ?? DEFAULT_MAX_ENVELOPE_BYTES);
    envelopes.push(envelope);
    rows.push({
      event_id: envelope.event_id,
      event_type: envelope.event_type,
      schema_version: envelope.schema_version,
      aggregate_id: envelope.aggregate_id,
      aggregate_version: envelope.aggregate_version,
      topic: options.topic,
      payload,
      producer: envelope.producer,
      occurred_at: envelope.occurred_at,
      traceparent: envelope.traceparent ?? null,
      tracestate: envelope.tracestate ?? null,
      deadline: envelope.deadline ?? null,
      extensions: envelope.extensions ?? null,
      replaces_event_id: input.replaces_event_id ?? null,
    });
  }
  markDirty(executor.transaction, await insertOutboxRows(executor, rows));
  return envelopes;
}

/** One event; see enqueueMany. */
export async function enqueue(
  tx: Queryable | SqlExecutor,
  event: EventInput,
  options: EnqueueOptions,
): Promise<Envelope> {
  const [envelope] = await enqueueMany(tx, [event], options);
  return envelope!;
}

/** The event's extensions with its `tenant` among them; a tenant given twice, differently, is refused. */
function withTenant(input: EventInput): { extensions?: Record<string, string> } {
  if (input.tenant === undefined) return input.extensions === undefined ? {} : { extensions: input.extensions };
  const named = input.extensions?.tenant;
  if (named !== undefined && named !== input.tenant)
    throw new EnvelopeValidationError([
      { path: 'tenant', rule: `is ${JSON.stringify(input.tenant)} but extensions.tenant is ${JSON.stringify(named)}` },
    ]);
  return { extensions: { ...input.extensions, tenant: input.tenant } };
}
