import { createTraceState, isSpanContextValid, TraceFlags, type Link, type SpanContext } from '@opentelemetry/api';

/**
 * The creation context of an event travels as W3C trace context (traceparent / tracestate) in the envelope, the
 * outbox row and the record headers. It is formatted and parsed here, by hand, rather than through the global
 * propagator: with no SDK registered the propagator is a no-op, and the stored value must not depend on which
 * propagators a process happens to configure.
 */

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
// The W3C limit is 512 characters and 32 list members; control characters would make headers ambiguous.
const TRACESTATE_MAX = 512;
const NO_CONTROL = /^[^\u0000-\u001f\u007f]*$/;

export interface TraceContextFields {
  traceparent?: string;
  tracestate?: string;
}

/** A version-00 traceparent as a remote span context, or null when it is missing or malformed. */
export function parseTraceparent(
  traceparent: string | null | undefined,
  tracestate?: string | null,
): SpanContext | null {
  if (!traceparent) return null;
  const m = TRACEPARENT.exec(traceparent);
  if (!m) return null;
  const context: SpanContext = {
    traceId: m[1]!,
    spanId: m[2]!,
    traceFlags: parseInt(m[3]!, 16) & TraceFlags.SAMPLED,
    isRemote: true,
  };
  if (!isSpanContextValid(context)) return null; // all-zero ids
  if (tracestate && validTracestate(tracestate)) context.traceState = createTraceState(tracestate);
  return context;
}

export function formatTraceparent(context: SpanContext): string {
  return `00-${context.traceId}-${context.spanId}-${(context.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** The fields to store for a span context; nothing for an invalid one. */
export function toTraceFields(context: SpanContext): TraceContextFields {
  if (!isSpanContextValid(context)) return {};
  const state = context.traceState?.serialize();
  return { traceparent: formatTraceparent(context), ...(state && validTracestate(state) ? { tracestate: state } : {}) };
}

/**
 * What a caller supplied, kept only if well-formed: a malformed traceparent is dropped (and its tracestate with
 * it, which means nothing without it) instead of failing the business transaction over telemetry.
 * `dropped` says whether something was thrown away, for the caller's count.
 */
export function sanitizeTraceFields(
  traceparent: string | undefined,
  tracestate: string | undefined,
): TraceContextFields & { dropped: boolean } {
  if (traceparent === undefined) return { dropped: tracestate !== undefined };
  if (!parseTraceparent(traceparent)) return { dropped: true };
  if (tracestate === undefined) return { traceparent, dropped: false };
  if (!validTracestate(tracestate)) return { traceparent, dropped: true };
  return { traceparent, tracestate, dropped: false };
}

/** A link to an event's creation context (the conventions: consumers and senders link, they are not children). */
export function creationLink(
  traceparent: string | null | undefined,
  tracestate: string | null | undefined,
  attributes?: Link['attributes'],
): Link | null {
  const context = parseTraceparent(traceparent, tracestate);
  if (!context) return null;
  return attributes ? { context, attributes } : { context };
}

function validTracestate(value: string): boolean {
  return value.length <= TRACESTATE_MAX && NO_CONTROL.test(value);
}
