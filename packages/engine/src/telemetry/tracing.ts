import {
  context,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type SpanOptions,
} from '@opentelemetry/api';
import { ATTR, LEGACY_ATTR, MESSAGING_SYSTEM, OPERATION, POSTBOX_ATTR } from './attributes.ts';
import { creationLink, parseTraceparent, toTraceFields, type TraceContextFields } from './trace-context.ts';

/**
 * Postbox's spans, through @opentelemetry/api only: with no SDK registered every span is a no-op, and links and
 * attributes are added only to recording spans, so tracing off costs one no-op span per operation. The tracer
 * is a proxy: an SDK registered after this module loaded is used from then on.
 *
 * The shape follows the messaging conventions (OpenTelemetry messaging conventions; docs/telemetry.md): `create {topic}` (PRODUCER) at enqueue is the
 * event's creation context, stored with it; the relay's `send {topic}` (CLIENT) links every message's creation
 * context; each consumer's `process {topic}` (CONSUMER, see process-spans.ts) starts a new trace linked to it.
 */
export const tracer = trace.getTracer('@postbox/engine', '0.1.0');

// The API's proxy provider delegates to a NoopTracerProvider until an SDK registers one.
const NoopTracerProvider = new ProxyTracerProvider().getDelegate().constructor;

/**
 * No SDK registered in this thread: per-record work (a consume task's 500 spans) is skipped altogether. Checked
 * per call, not once, since an SDK may be registered later.
 */
export function tracingOff(): boolean {
  const provider = trace.getTracerProvider();
  return (provider instanceof ProxyTracerProvider ? provider.getDelegate() : provider) instanceof NoopTracerProvider;
}

/** The messaging attributes every Postbox span carries, both spellings (attributes.ts). */
export function messagingAttributes(operation: string, topic: string | null): Attributes {
  const attributes: Attributes = {
    [ATTR.systemName]: MESSAGING_SYSTEM,
    [LEGACY_ATTR.system]: MESSAGING_SYSTEM,
    [ATTR.operationType]: operation,
    [ATTR.operationName]: operation,
  };
  if (topic !== null) attributes[ATTR.destinationName] = topic;
  return attributes;
}

/** Per-message attributes (on a process span, or on a send span's link to that message). */
export function messageAttributes(m: {
  eventId: string | null;
  key: string | null;
  partition?: number | null;
  offset?: string | null;
}): Attributes {
  const attributes: Attributes = {};
  if (m.eventId) attributes[ATTR.messageId] = m.eventId;
  if (m.key !== null) {
    attributes[ATTR.kafkaKey] = m.key;
    attributes[LEGACY_ATTR.kafkaKey] = m.key;
  }
  if (m.partition !== undefined && m.partition !== null && m.partition >= 0)
    attributes[ATTR.partitionId] = String(m.partition);
  if (m.offset !== undefined && m.offset !== null && m.offset !== '-1') {
    const offset = Number(m.offset);
    attributes[ATTR.kafkaOffset] = offset;
    attributes[LEGACY_ATTR.kafkaOffset] = offset;
  }
  return attributes;
}

export interface CreatedEvent {
  event_id: string;
  event_type: string;
  aggregate_id: string;
  aggregate_version: number;
  extensions?: Record<string, string> | null;
}

/**
 * The `create {topic}` span of one event, a child of whatever is active (the HTTP request, the command); its
 * context is what the event carries from here on. Ended at once: creating is the moment of the outbox insert,
 * and the span must be exportable even if the caller's transaction runs long.
 */
export function createEventContext(topic: string, event: CreatedEvent): TraceContextFields {
  if (tracingOff()) return {}; // no SDK, hence no context manager: nothing could be active to inherit from
  const span = tracer.startSpan(`create ${topic}`, { kind: SpanKind.PRODUCER });
  if (span.isRecording()) {
    span.setAttributes(messagingAttributes(OPERATION.create, topic));
    span.setAttributes(messageAttributes({ eventId: event.event_id, key: event.aggregate_id }));
    span.setAttribute(POSTBOX_ATTR.eventType, event.event_type);
    span.setAttribute(POSTBOX_ATTR.aggregateVersion, event.aggregate_version);
    // A saga's commands and its participants' replies carry its id and step: one search finds the whole flow
    // (each is also the child of the process span of the reply or command that caused it).
    const saga = event.extensions?.sagaid;
    if (saga) {
      span.setAttribute(POSTBOX_ATTR.sagaId, saga);
      if (event.extensions?.sagastep) span.setAttribute(POSTBOX_ATTR.sagaStep, event.extensions.sagastep);
      if (event.extensions?.sagadirection)
        span.setAttribute(POSTBOX_ATTR.sagaDirection, event.extensions.sagadirection);
    }
  }
  span.end();
  return toTraceFields(span.spanContext());
}

export interface SentMessage {
  event_id: string;
  aggregate_id: string;
  topic: string;
  traceparent: string | null;
  tracestate: string | null;
  /** Where the broker stored it; absent when the send failed. */
  partition?: number;
  offset?: string;
  /** The error code when the send failed. */
  error?: string;
}

/**
 * The relay's `send` span for one publish call, made after the call from its measured start (the confirmations,
 * and so each message's partition and offset, exist only then). Each message is a link to its creation context
 * carrying that message's id, key, partition and offset; the span itself says what the batch shares.
 */
export function recordSendSpan(lane: number | null, startTime: number, messages: SentMessage[]): void {
  if (messages.length === 0) return;
  const topics = new Set(messages.map((m) => m.topic));
  const topic = topics.size === 1 ? messages[0]!.topic : null;
  const span = tracer.startSpan(topic === null ? 'send' : `send ${topic}`, { kind: SpanKind.CLIENT, startTime });
  if (span.isRecording()) {
    const partitions = new Set(messages.map((m) => m.partition));
    const failed = messages.filter((m) => m.error !== undefined);
    span.setAttributes({
      ...messagingAttributes(OPERATION.send, topic),
      [ATTR.batchCount]: messages.length,
      // A send of several lanes' heads names none: each message's link carries its own key.
      ...(lane === null ? {} : { [POSTBOX_ATTR.lane]: lane }),
    });
    if (partitions.size === 1 && messages[0]!.partition !== undefined)
      span.setAttribute(ATTR.partitionId, String(messages[0]!.partition));
    if (messages.length === 1)
      span.setAttributes(
        messageAttributes({
          eventId: messages[0]!.event_id,
          key: messages[0]!.aggregate_id,
          offset: messages[0]!.offset ?? null,
        }),
      );
    const links: Link[] = [];
    for (const m of messages) {
      const attributes = messageAttributes({
        eventId: m.event_id,
        key: m.aggregate_id,
        partition: m.partition ?? null,
        offset: m.offset ?? null,
      });
      if (topic === null) attributes[ATTR.destinationName] = m.topic;
      if (m.error !== undefined) attributes[ATTR.errorType] = m.error;
      const link = creationLink(m.traceparent, m.tracestate, attributes);
      if (link) links.push(link);
    }
    span.addLinks(links);
    if (failed.length > 0) {
      span.setAttribute(ATTR.errorType, failed[0]!.error!);
      span.setStatus({
        code: SpanStatusCode.ERROR,
        message: `${failed.length} of ${messages.length} not confirmed (${failed[0]!.error})`,
      });
    }
  }
  span.end();
}

/** The context a traceparent names, for spans that must be its children (a due retry's process spans). */
export function contextOf(traceparent: string | undefined): Context | null {
  const parent = parseTraceparent(traceparent);
  return parent ? trace.setSpanContext(ROOT_CONTEXT, parent) : null;
}

/** The active span's traceparent, to hand to another thread or to a job. */
export function activeTraceparent(span: Span): string | undefined {
  return toTraceFields(span.spanContext()).traceparent;
}

/**
 * The one general span helper: runs `fn` in a new span (links and attributes added only when it records),
 * marks an error with its code — never its message, which may quote data — and ends it.
 */
export async function inSpan<T>(
  name: string,
  options: SpanOptions & { parent?: Context },
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const { attributes, links, parent, ...rest } = options;
  const span = parent ? tracer.startSpan(name, { ...rest, root: false }, parent) : tracer.startSpan(name, rest);
  if (span.isRecording()) {
    if (attributes) span.setAttributes(attributes);
    if (links) span.addLinks(links);
  }
  try {
    return await context.with(trace.setSpan(parent ?? context.active(), span), () => fn(span));
  } catch (cause) {
    markError(span, cause);
    throw cause;
  } finally {
    span.end();
  }
}

/** Error status and error.type from a Postbox error code (or the error's name). */
export function markError(span: Span, cause: unknown, code?: string): void {
  if (!span.isRecording()) return;
  const type = code ?? errorType(cause);
  span.setAttribute(ATTR.errorType, type);
  span.setStatus({ code: SpanStatusCode.ERROR, message: type });
}

function errorType(cause: unknown): string {
  const e = cause as { code?: unknown; name?: unknown } | null;
  if (e && typeof e.code === 'string') return e.code;
  if (e && typeof e.name === 'string') return e.name;
  return 'error';
}
