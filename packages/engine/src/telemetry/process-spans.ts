import { context, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span } from '@opentelemetry/api';
import type { Envelope } from '../envelope/envelope.ts';
import type { Handler } from '../records/handler.ts';
import type { RecordResult, WireRecord } from '../records/wire.ts';
import { ATTR, OPERATION, POSTBOX_ATTR } from './attributes.ts';
import { creationLink } from './trace-context.ts';
import { activeTraceparent, contextOf, messageAttributes, messagingAttributes, tracer, tracingOff } from './tracing.ts';

export interface ProcessScope {
  consumer: string;
  groupId?: string | undefined;
}

/**
 * The `process {topic}` spans of one consume task, one per record: each starts a new trace (or, for a due retry,
 * a child of its retry span) with a link to the event's creation context — a consumer's work is caused by the
 * event, it is not part of the producer's request. A span lasts from the start of the task to the event's final
 * outcome (after the commit that made it so); the handler runs inside it, so spans a handler makes are its
 * children. A parked successor applied in this task's transaction gets a span of its own, ended with the outcome
 * of the event that released it.
 */
export class ProcessSpans {
  readonly #records: WireRecord[];
  readonly #scope: ProcessScope;
  readonly #spans: Span[];
  readonly #byEvent = new Map<string, number>();
  readonly #runs = new Map<number, number>();
  readonly #drained: Array<{ span: Span; trigger: number; eventId: string }> = [];
  readonly #parent: Context | null;
  readonly #off: boolean;

  constructor(records: WireRecord[], scope: ProcessScope, parentTraceparent?: string) {
    this.#records = records;
    this.#scope = scope;
    this.#off = tracingOff();
    this.#parent = this.#off ? null : contextOf(parentTraceparent);
    // Attributes shared by the task's records are built once per topic (a task has hundreds of records).
    const shared = new Map<string, Attributes>();
    this.#spans = this.#off
      ? []
      : records.map((r, i) => {
          const span = this.#start(r.topic);
          if (span.isRecording()) {
            let common = shared.get(r.topic);
            if (!common) shared.set(r.topic, (common = this.#common(r.topic)));
            span.setAttributes(common);
            span.setAttributes(
              messageAttributes({
                eventId: r.headers.id ?? null,
                key: r.key,
                partition: r.partition,
                offset: r.offset,
              }),
            );
            span.setAttribute(POSTBOX_ATTR.attempt, r.attempt);
            if (r.headers.type) span.setAttribute(POSTBOX_ATTR.eventType, r.headers.type);
            if (r.headers.aggregateversion)
              span.setAttribute(POSTBOX_ATTR.aggregateVersion, Number(r.headers.aggregateversion));
            if (r.value) span.setAttribute(ATTR.bodySize, r.value.length);
            const link = creationLink(r.headers.traceparent, r.headers.tracestate);
            if (link) span.addLink(link);
          }
          if (r.headers.id) this.#byEvent.set(r.headers.id, i);
          return span;
        });
  }

  /** The handler, run inside its event's span; a parked successor's run opens that successor's span. */
  wrap(handler: Handler): Handler {
    if (this.#off) return handler;
    return (event, tx, ctx) => {
      const index = this.#byEvent.get(event.event_id);
      if (index === undefined) return this.#runDrained(event, () => handler(event, tx, ctx), ctx.partition, ctx.offset);
      const runs = (this.#runs.get(index) ?? 0) + 1;
      this.#runs.set(index, runs);
      const span = this.#spans[index]!;
      // The batch transaction rolled back and the event runs again alone (consumer/consume-step.ts).
      if (runs > 1 && span.isRecording()) span.addEvent('handler run again in a transaction of its own');
      return context.with(trace.setSpan(context.active(), span), () => handler(event, tx, ctx));
    };
  }

  /** The traceparent of an event's span, for what it schedules (a retry job links back to it). */
  traceparentOf(eventId: string): string | undefined {
    const index = this.#byEvent.get(eventId);
    return index === undefined ? undefined : activeTraceparent(this.#spans[index]!);
  }

  /** Ends every span with its record's outcome. */
  end(results: RecordResult[]): void {
    this.#spans.forEach((span, i) => {
      const r = results[i];
      if (span.isRecording() && r) {
        span.setAttribute(POSTBOX_ATTR.outcome, r.outcome);
        if (r.code && (r.outcome === 'failed' || r.outcome === 'transient' || r.outcome === 'scheduled')) {
          span.setAttribute(ATTR.errorType, r.code);
          span.setStatus({ code: SpanStatusCode.ERROR, message: r.code });
        }
      }
      span.end();
    });
    // A successor drained twice ran first in a batch transaction that rolled back.
    const last = new Map(this.#drained.map((d, i) => [d.eventId, i]));
    this.#drained.forEach(({ span, trigger, eventId }, i) => {
      const r = results[trigger];
      const applied = last.get(eventId) === i && r !== undefined && r.outcome === 'applied' && r.drained > 0;
      if (span.isRecording()) span.setAttribute(POSTBOX_ATTR.outcome, applied ? 'drained' : 'rolled_back');
      span.end();
    });
  }

  /** The task itself failed (thrown, not a per-record outcome): every span ends in error. */
  fail(code: string): void {
    for (const span of [...this.#spans, ...this.#drained.map((d) => d.span)]) {
      if (span.isRecording()) {
        span.setAttribute(ATTR.errorType, code);
        span.setStatus({ code: SpanStatusCode.ERROR, message: code });
      }
      span.end();
    }
  }

  #start(topic: string): Span {
    const name = `process ${topic}`;
    return this.#parent
      ? tracer.startSpan(name, { kind: SpanKind.CONSUMER }, this.#parent)
      : tracer.startSpan(name, { kind: SpanKind.CONSUMER, root: true });
  }

  #common(topic: string): Attributes {
    return {
      ...messagingAttributes(OPERATION.process, topic),
      [POSTBOX_ATTR.consumer]: this.#scope.consumer,
      ...(this.#scope.groupId ? { [ATTR.consumerGroup]: this.#scope.groupId } : {}),
    };
  }

  #runDrained<T>(event: Envelope, run: () => Promise<T>, partition: number, offset: string): Promise<T> {
    // The successor shares its releaser's aggregate, hence its key, topic and partition.
    const trigger = this.#records.findIndex((r) => r.key === event.aggregate_id);
    const topic = this.#records[trigger]?.topic ?? this.#records[0]?.topic ?? 'unknown';
    const span = this.#start(topic);
    if (span.isRecording()) {
      span.setAttributes({
        ...this.#common(topic),
        ...messageAttributes({ eventId: event.event_id, key: event.aggregate_id, partition, offset }),
        [POSTBOX_ATTR.eventType]: event.event_type,
        [POSTBOX_ATTR.aggregateVersion]: event.aggregate_version,
      });
      const link = creationLink(event.traceparent, event.tracestate);
      if (link) span.addLink(link);
    }
    this.#drained.push({ span, trigger, eventId: event.event_id });
    return context.with(trace.setSpan(context.active(), span), run);
  }
}
